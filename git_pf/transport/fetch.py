"""Fetching images: refs and image trees now, side-store objects later (lazily).

``fetch`` brings the remote's image branches into ``refs/pf/remotes/<r>/heads/``
and its tags into ``refs/pf/tags/``, learns the remote's objects index, then
creates local branches the repository lacks and fast-forwards those that are
behind; a branch that diverged is left alone and reported. ``clone`` is
``git clone`` + install + fetch. No side-store object is transferred here.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from .. import refs as refs_mod
from ..errors import TransferFailed, UsageError
from . import adapters, gitcmd, remotes
from .progress import Progress
from .remotes import Remote


@dataclass
class FetchResult:
    remote: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    tags: int = 0

    def to_json(self) -> dict:
        return {"remote": self.remote, "created": self.created, "updated": self.updated,
                "diverged": self.diverged, "tags": self.tags}


def refspecs(remote: Remote) -> list[str]:
    return [f"+refs/pf/heads/*:{remote.tracking('heads/*')}", "+refs/pf/tags/*:refs/pf/tags/*",
            f"+refs/pf/meta/*:{remote.tracking('meta/*')}"]  # the adapter it recorded (storerecord)


def fetch(repo, remote: Remote, progress: Progress | None = None) -> FetchResult:
    progress = progress or Progress(True)
    proc = gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--recurse-submodules=no", *progress.git_flag,
                                     remote.arg, *refspecs(remote)], check=False, quiet_stderr=not progress.enabled,
                      cwd=repo.git.workdir or repo.git_dir)
    if proc.returncode != 0:
        raise TransferFailed(f"git fetch from '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
    adapters.for_remote(repo, remote).refresh()
    result = FetchResult(remote.arg, tags=len(refs_mod.list_refs(repo.git, refs_mod.TAGS)))
    _update_branches(repo, remote, result)
    return result


def _update_branches(repo, remote: Remote, result: FetchResult) -> None:
    git = repo.git
    for name, theirs in refs_mod.list_refs(git, remote.tracking("heads/")).items():
        ours = refs_mod.branch_tip(git, name)
        if ours == theirs:
            continue
        if ours is None:
            refs_mod.update_branch(git, name, theirs, None, f"pf fetch: from {remote.arg}")
            result.created.append(name)
        elif git.descendant_of(pygit2.Oid(hex=theirs), pygit2.Oid(hex=ours)):
            refs_mod.update_branch(git, name, theirs, ours, f"pf fetch: fast-forward from {remote.arg}")
            result.updated.append(name)
        elif not git.descendant_of(pygit2.Oid(hex=ours), pygit2.Oid(hex=theirs)):
            result.diverged.append(name)
    current = refs_mod.current_branch(git)
    if (current is None or refs_mod.branch_tip(git, current) is None) and result.created:
        refs_mod.set_head(git, refs_mod.DEFAULT_BRANCH if refs_mod.DEFAULT_BRANCH in result.created
                          else result.created[0])


def clone(url: str, directory: Path, progress: Progress | None = None):
    """``git clone URL DIR``, then install git-pf there and fetch its images; returns (repo, result)."""
    from ..repo import Repo
    from . import install

    progress = progress or Progress(True)
    directory = Path(directory)
    if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
        raise UsageError(f"destination '{directory}' already exists and is not an empty directory")
    local = remotes.Remote(None, url, Path.cwd()).local_path()
    if local is not None and not local.exists():
        raise UsageError(f"no repository at '{url}': it does not exist")
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0")
    env.pop("GIT_DIR", None)
    proc = subprocess.run(["git", "clone", *progress.git_flag, url, str(directory)], env=env,
                          stdout=subprocess.PIPE, stderr=None if progress.enabled else subprocess.PIPE)
    if proc.returncode != 0:
        raise TransferFailed(f"git clone failed: {gitcmd.last_line(proc.stderr)}")
    repo, _ = Repo.init(directory)
    install.install(repo, "origin")
    repo = Repo.open(directory)
    remote = remotes.resolve(repo, "origin")
    path = remote.local_path()
    if path is not None and remotes.file_root(repo, remote, "file").is_dir():
        # a local remote that holds a file store: use it (pf.remote.origin.store=file)
        gitcmd.run(repo.git_dir, ["config", "pf.remote.origin.store", "file"])
    return repo, fetch(repo, remote, progress)
