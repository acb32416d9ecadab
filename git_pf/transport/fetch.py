"""Fetching images: refs and image trees now, side-store objects later (lazily).

``fetch`` brings the remote's image branches into ``refs/pf/remotes/<r>/heads/``
and its tags into ``refs/pf/remotes/<r>/tags/`` (no other ref is touched by
git: ``--refmap=`` keeps configured refspecs out), learns the remote's objects
index, then creates local branches the repository lacks and fast-forwards
those that are behind; a branch that diverged is left alone and reported. A
tag is created locally when the repository has none of that name; a local tag
is never moved: one that differs from the remote's is kept and reported. The
remote's store record is reported when it is not what objects use
(``adapters.record_note``), never a reason to fail. ``clone`` is ``git clone``
+ install + fetch, and pins the store the remote records at that moment. No
side-store object is transferred here.
"""
from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ..image import refs as refs_mod
from ..core.errors import TransferFailed, UsageError
from . import adapters, gitcmd, remotes, storerecord
from .progress import Progress
from .remotes import Remote


@dataclass
class FetchResult:
    remote: str
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    diverged: list[str] = field(default_factory=list)
    tags: int = 0
    new_tags: list[str] = field(default_factory=list)
    kept_tags: list[str] = field(default_factory=list)  # local tags that differ from the remote's: left
    store_note: str | None = None  # the remote's store record, when it is not what objects use
    pinned: str | None = None  # clone: where objects go, as pinned from the remote's record

    def to_json(self) -> dict:
        return {"remote": self.remote, "created": self.created, "updated": self.updated,
                "diverged": self.diverged, "tags": self.tags, "new_tags": self.new_tags,
                "kept_tags": self.kept_tags, "store_note": self.store_note, "pinned": self.pinned}


def refspecs(remote: Remote) -> list[str]:
    """Every ref lands under ``refs/pf/remotes/<r>/``: nothing the remote says is forced onto a local ref."""
    return [f"+refs/pf/heads/*:{remote.tracking('heads/*')}", f"+refs/pf/tags/*:{remote.tracking('tags/*')}",
            f"+refs/pf/meta/*:{remote.tracking('meta/*')}",  # the adapter it recorded (storerecord)
            f"^refs/pf/{storerecord.PINNED}"]  # never over the record remembered locally


def fetch(repo, remote: Remote, progress: Progress | None = None) -> FetchResult:
    progress = progress or Progress(True)
    proc = gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--refmap=", "--recurse-submodules=no",
                                     *progress.git_flag, remote.arg, *refspecs(remote)], check=False,
                      quiet_stderr=not progress.enabled, cwd=repo.git.workdir or repo.git_dir)
    if proc.returncode != 0:
        raise TransferFailed(f"git fetch from '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
    result = FetchResult(remote.arg, store_note=adapters.record_note(repo, remote))
    adapters.make(repo, remote, adapters.choice(repo, remote, unconfirmed="ignore")).refresh()
    _update_tags(repo, remote, result)
    result.tags = len(refs_mod.list_refs(repo.git, refs_mod.TAGS))
    _update_branches(repo, remote, result)
    return result


def _update_tags(repo, remote: Remote, result: FetchResult) -> None:
    """Create the remote's tags this repository lacks; a local tag of the same name that
    differs stays where it is (the remote's stays in ``refs/pf/remotes/<r>/tags/``)."""
    git = repo.git
    for name, theirs in refs_mod.list_refs(git, remote.tracking("tags/")).items():
        ref = git.references.get(refs_mod.TAGS + name)
        if ref is None:
            refs_mod.update_ref(git, refs_mod.TAGS + name, theirs, None, f"pf fetch: tag from {remote.arg}")
            result.new_tags.append(name)
        elif str(ref.resolve().target) != theirs:
            result.kept_tags.append(name)


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
    result = fetch(repo, remote, progress)
    if remotes.store_setting(repo, remote) is None:
        _pin_recorded(repo, remote, result)
    return repo, result


def _pin_recorded(repo, remote: Remote, result: FetchResult) -> None:
    """Pin the store the remote records at clone time (later fetches never change the pin)."""
    recorded, problem = adapters.record_of(repo, remote)
    if problem is not None or recorded is None or recorded.kind == "git":
        return
    try:
        chosen = adapters.configure(repo, remote, recorded.value)
    except UsageError as e:  # plain http, say: left unpinned, the reason said
        result.store_note = f"note: the object store that '{remote.arg}' records was not pinned: {e}"
        return
    adapters.make(repo, remote, chosen).load_local()  # learns (and remembers) what the record lists
    result.pinned = adapters.describe(repo, remote, chosen)
    result.store_note = adapters.record_note(repo, remote)  # its listings may still be unusable
