"""Lazy fetch: side-store objects arrive from a remote, in batches, when first read.

``attach(repo)`` sets ``repo.store.fetcher``. Asked for missing oids, it
tries each remote that has git-pf tracking refs (``origin`` first), fetches
the batch through that remote's adapter, and also fetches the chunks listed
by any chunk index it just received (so a large file costs one more round
trip, not one per chunk). Objects no remote has stay missing: the caller's
MissingObject names them. Corrupt frames are refused (CorruptObject). Also
gives the store the objects this repository holds as git blobs (``held``).
"""
from __future__ import annotations

import os

from ..core.errors import CorruptObject, PfError
from ..core import limits
from ..store.large import decode_chunk_index, index_bound
from . import adapters, remotes
from .held import HeldObjects
from .progress import Progress


def lazy_remotes(repo) -> list[remotes.Remote]:
    names = remotes.names(repo)
    with_pf = [n for n in names if any(r.startswith(f"{remotes.TRACKING}{n}/") for r in repo.git.references)]
    with_pf.sort(key=lambda n: n != "origin")
    return [remotes.resolve(repo, n) for n in with_pf]


class Fetcher:
    def __init__(self, repo):
        self.repo = repo

    def __call__(self, missing: list[str]) -> None:
        if os.environ.get("GIT_PF_NO_LAZY_FETCH"):
            return
        todo = list(dict.fromkeys(missing))
        progress = Progress(quiet=bool(os.environ.get("GIT_PF_QUIET")))
        problems: list[str] = []  # why a remote could not give what was asked: said when objects stay missing
        self.repo.store.fetch_problem = None
        for remote in lazy_remotes(self.repo):
            if not todo:
                return
            try:
                adapter = adapters.for_remote(self.repo, remote)
                adapter.load_local()
                adapter.download(self.repo.store, todo, progress)
                chunks = self._chunks_of(todo)
                if chunks:
                    adapter.download(self.repo.store, chunks, progress)
            except CorruptObject:
                raise
            except PfError as e:
                problems.append(f"remote '{remote.arg}': {e}")
                continue  # this remote is unreachable or refuses; try the next
            todo = [o for o in todo if not self.repo.store.has(o)]
        if todo and problems:
            self.repo.store.fetch_problem = "; ".join(problems)

    def _chunks_of(self, oids: list[str]) -> list[str]:
        out = []
        for oid in oids:
            size = self.repo.store.frame_size(oid)
            if size is None or size > 1 << 20:
                continue
            try:
                chunks = decode_chunk_index(self.repo.store.get(oid, at_most=index_bound(limits.active().max_object)))
            except (PfError, ValueError, UnicodeDecodeError):
                continue
            out.extend(c.oid for c in chunks if not self.repo.store.has(c.oid))
        return out


def attach(repo) -> None:
    repo.store.fetcher = Fetcher(repo)
    repo.store.held = HeldObjects(repo.git)  # what the default adapter brought, as git blobs
