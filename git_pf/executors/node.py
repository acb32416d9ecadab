"""A worker node's side of a cluster task (docs/scale.md): the remote as a task names it, one
cache repository per remote per node, narrow fetches into it, and results pushed back as refs.

``RemoteSpec`` is what a task carries of the remote: its URL and the object-store
settings of the driver's git config (an allow-list; never credentials, never a
path of the driver's machine: a remote or store on a local path is refused).
``cache`` opens the node's bare cache repository of that URL under
``$GIT_PF_NODE_CACHE`` (else ``~/.cache/git-pf/remotes``), made once, with
``origin`` and those settings; git's and git-pf's automatic gc are off there,
so no gc runs under a task. Fetches into it hold an exclusive lock (a file
beside it); side-store objects come lazily, when a world first needs them,
through the remote's adapter as in any clone. ``publish`` uploads what an
image needs, then pushes one ref, never forced: False when the remote already
has that ref at another commit; ``publish_many`` does that for many results in
one upload and one ``git push`` (a fan-out's chunk of forks).
"""
from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pygit2

from ..core import config
from ..image import refs
from ..core.errors import PfError, UsageError
from ..transport import gitcmd
from ..transport.progress import Progress
from ..transport.remotes import Remote

CACHE_ENV = "GIT_PF_NODE_CACHE"
NAME = "origin"  # the remote's name in a node's cache
TRACKING = f"refs/pf/remotes/{NAME}/"
_PER_REMOTE = ("store", "s3Endpoint", "allowHttp")  # pf.remote.<name>.<key>
_GLOBAL = ("pf.s3.endpoint", "pf.s3.region", "pf.s3.jobs", "pf.s3.multipartThreshold", "pf.s3.partSize",
           "lfs.url", "lfs.concurrenttransfers", "pf.largeFileThreshold")
ALLOWED = frozenset([f"pf.remote.{NAME}.{k}" for k in _PER_REMOTE] + [f"remote.{NAME}.lfsurl", *_GLOBAL])


@dataclass(frozen=True)
class RemoteSpec:
    url: str
    settings: tuple[tuple[str, str], ...] = ()  # git config of the cache repository, keys in ALLOWED

    @classmethod
    def of(cls, repo, remote: Remote) -> "RemoteSpec":
        """What a task carries of ``remote``; refuses one the workers could not reach by its URL."""
        if remote.local_path() is not None:
            raise UsageError(f"remote '{remote.arg}' is a path on this machine; cluster workers need a URL "
                             f"they can reach (git://, ssh://, https://)")
        found = []
        for key in _PER_REMOTE:
            value = config.get_str(repo.git, f"pf.remote.{remote.name}.{key}") if remote.name else None
            if value is not None:
                found.append((f"pf.remote.{NAME}.{key}", value))
        if remote.name and config.get_str(repo.git, f"remote.{remote.name}.lfsurl"):
            found.append((f"remote.{NAME}.lfsurl", config.get_str(repo.git, f"remote.{remote.name}.lfsurl")))
        found += [(k, config.get_str(repo.git, k)) for k in _GLOBAL if config.get_str(repo.git, k) is not None]
        store = dict(found).get(f"pf.remote.{NAME}.store", "")
        if store.strip().startswith("file"):
            raise UsageError(f"remote '{remote.arg}' keeps its objects in a directory of this machine "
                             f"({store}); cluster workers need git, lfs or s3")
        return cls(remote.url, tuple(found)).check()

    def check(self) -> "RemoteSpec":
        """Refuse settings outside the allow-list or values that are not one line (a task is data)."""
        if not isinstance(self.url, str) or not self.url or "\n" in self.url or self.url.startswith("-"):
            raise UsageError("a task's remote URL is not one line")
        for key, value in self.settings:
            if key not in ALLOWED or not isinstance(value, str) or "\n" in value or "\0" in value:
                raise UsageError(f"a task's remote setting '{key}' is not one this node takes")
        return self


def cache_root() -> Path:
    found = os.environ.get(CACHE_ENV)
    return Path(found).expanduser() if found else Path.home() / ".cache" / "git-pf" / "remotes"


@contextmanager
def _locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def cache_path(spec: RemoteSpec) -> Path:
    return cache_root() / (hashlib.sha256(spec.url.encode()).hexdigest()[:24] + ".git")


def cache(spec: RemoteSpec):
    """The node's cache repository of ``spec``'s remote (a ``Repo``), made on first use."""
    from ..repo import Repo

    spec.check()
    path = cache_path(spec)
    with _locked(path.with_suffix(".lock")):
        if not (path / "HEAD").exists():
            tmp = Path(tempfile.mkdtemp(prefix=".new-", dir=path.parent))
            try:
                pygit2.init_repository(str(tmp), bare=True)
                gitcmd.run(tmp, ["remote", "add", NAME, spec.url])
                gitcmd.run(tmp, ["config", "gc.auto", "0"])  # no gc under a task: the cache is shared
                gitcmd.run(tmp, ["config", "gc.autoPackLimit", "0"])
                os.rename(tmp, path)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        git = pygit2.Repository(str(path))
        for key, value in spec.settings:
            if config.get_str(git, key) != value:
                gitcmd.run(path, ["config", key, value])
    return Repo(pygit2.Repository(str(path)))


def fetch(repo, specs: list[str]) -> None:
    """``git fetch origin SPECS`` into the cache, one fetch at a time on this node."""
    with _locked(repo.git_dir.with_suffix(".lock")):
        gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--refmap=", "--quiet", NAME, *specs])


def origin(repo, spec: RemoteSpec) -> Remote:
    """The remote of a cache repository made for ``spec``."""
    return Remote(NAME, spec.url, repo.git_dir)


def _adds_objects(repo, commit: str, known: str, seen: dict) -> bool:
    """Whether the image ``commit`` needs side-store objects that the image ``known`` does not;
    ``seen`` keeps what each tree needs, so images of one tree (a chunk's forks) are read once."""
    from ..transport import reach

    def needs(image: str) -> set[str]:
        tree = repo.git[image].peel(pygit2.Tree).id
        if tree not in seen:
            seen[tree] = set(reach.objects_of(repo.store, reach.reach(repo.git, [image])))
        return seen[tree]
    mine = needs(commit)
    return bool(mine) and bool(mine - needs(known))


def publish(repo, remote: Remote, commit: str, ref: str, known: str | None = None) -> bool:
    """Upload what ``commit``'s images need, then push it to ``ref`` on ``remote``, never forced.
    ``known``: an image whose objects the remote holds (it came from there): when ``commit`` needs
    no other, nothing is uploaded (and the remote's objects index is not asked). False when the
    remote has ``ref`` at another commit already (nothing is overwritten)."""
    return publish_many(repo, remote, [(commit, ref, known)])[ref]


def publish_many(repo, remote: Remote, results: list[tuple[str, str, str | None]]) -> dict[str, bool]:
    """``publish`` of many ``(commit, ref, known)`` at once: one upload of the objects they need and
    one ``git push`` of every ref, each ref still never forced. ``{ref: pushed}``: False where the
    remote has that ref at another commit (the other refs are pushed all the same)."""
    from ..transport.push import upload_objects

    if not results:
        return {}
    seen: dict = {}
    upload = [commit for commit, _, known in results if known is None or _adds_objects(repo, commit, known, seen)]
    if upload:
        upload_objects(repo, remote, upload, Progress(True))
    proc = gitcmd.run(repo.git_dir, ["push", "--porcelain", remote.arg, *(f"{c}:{ref}" for c, ref, _ in results)],
                      check=False, env={"GIT_PF_SKIP_PUSH": "1"}, cwd=repo.git.workdir or repo.git_dir)
    done: dict[str, bool] = {}
    for line in proc.stdout.decode("utf-8", "replace").splitlines():  # <flag> TAB <from>:<to> TAB <summary>
        flag, _, rest = line.partition("\t")
        to = rest.split("\t", 1)[0].partition(":")[2]
        if to and flag in (" ", "*", "="):
            done[to] = True
    wanted = {ref: commit for commit, ref, _ in results}
    unsure = [ref for ref in wanted if ref not in done]
    if unsure:  # refused (another commit there), or the push failed: the remote's word
        theirs = gitcmd.ls_remote(repo.git_dir, remote.arg, unsure, cwd=repo.git.workdir or repo.git_dir)
        for ref in unsure:
            if theirs.get(ref) is None:
                raise PfError(f"cannot push {ref}: {gitcmd.last_line(proc.stderr)}", 1)
            done[ref] = theirs[ref] == wanted[ref]
    return {ref: done[ref] for ref in wanted}


def tracked(repo, ref: str) -> str | None:
    """The commit the last fetch saw for the remote's ``refs/pf/<ref>``, or None."""
    return refs.ref_tip(repo.git, TRACKING + ref)
