"""The ``lfs`` adapter: side-store objects in any Git LFS server, through its batch API.

Objects go up by the sha256 and size of their raw bytes (the frame is decoded on
the way, so the server's own checks apply): ``POST <endpoint>/objects/batch``
(operation upload, transfer basic, 100 objects a request), a PUT for each
object the server lacks, and its ``verify`` action when offered. Downloads ask
the same way (operation download) and re-hash every object before it enters
the local store (``CorruptObject`` otherwise, and nothing is stored). A few
threads move objects in parallel. LFS servers want each object's size to
serve it, so the sizes of what was uploaded are kept in the remote's store
record (``storerecord``, ``sizes/``); that record is also what ``has`` reads.
Nothing is kept locally but the side store; logins come from git's
credential helpers (``lfsauth``). Touches the server and the local store only.
"""
from __future__ import annotations

import hashlib
import time
from concurrent.futures import ThreadPoolExecutor

import pygit2

from ..errors import CorruptObject, TransferFailed
from ..store.frames import OID_RE, decoded_size
from ..store.sidestore import SideStore
from . import lfsauth, storerecord
from .progress import Progress
from .remotes import Remote

BATCH = 100
_TRIES = 4  # a transfer answered 5xx is tried again, as git-lfs does
DEFAULT_TRANSFERS = 4


class LfsAdapter:
    def __init__(self, repo, remote: Remote, url: str | None = None):
        self.repo, self.remote = repo, remote
        self.url = lfsauth.endpoint(repo, remote, url)
        self.http = lfsauth.Session(repo, self.url)
        self.sizes: dict[str, int] = {}  # what the remote's store record lists
        self.fresh = False
        self.record_sizes: dict[str, int] = {}  # for the store record: objects this push found or sent
        try:  # git-lfs's own setting
            n = repo.git.config.get_int("lfs.concurrenttransfers")
        except (KeyError, ValueError, pygit2.GitError):
            n = DEFAULT_TRANSFERS
        self.transfers = max(1, min(n, 32))

    @property
    def record_url(self) -> str | None:
        """The endpoint for the store record: None when a clone derives the same one from its URL."""
        return None if self.url == lfsauth.derive(self.remote.url) else self.url

    # -- what the remote holds ---------------------------------------------------
    def _where(self) -> str:
        return f"the store record of remote '{self.remote.arg}'"

    def refresh(self) -> None:
        """Learn the remote's store record (one ls-remote; a fetch when it moved)."""
        self.sizes = storerecord.read_sizes(self.repo.git, storerecord.refresh(self.repo, self.remote), self._where())
        self.fresh = True

    def load_local(self) -> None:
        """Use the store record as last fetched (no network)."""
        self.sizes = storerecord.read_sizes(self.repo.git, storerecord.tracked(self.repo, self.remote), self._where())

    def has(self, oids) -> set[str]:
        return {o for o in oids if o in self.sizes}

    # -- the batch API ---------------------------------------------------------------
    def _batch(self, operation: str, objects: list[tuple[str, int]]) -> dict[str, dict]:
        """``{oid: the server's entry}`` for ``objects`` (oid, size); entries checked for shape."""
        doc = {"operation": operation, "transfers": ["basic"], "hash_algo": "sha256",
               "objects": [{"oid": o, "size": n} for o, n in objects]}
        answer = self.http.post_json(self.url + "/objects/batch", doc)
        if answer.get("transfer", "basic") != "basic" or not isinstance(answer.get("objects"), list):
            raise TransferFailed(f"the lfs server at {self.http.host} sent a batch answer this client cannot use")
        asked = dict(objects)
        out = {}
        for entry in answer["objects"]:
            if isinstance(entry, dict) and entry.get("oid") in asked and isinstance(entry.get("actions", {}), dict):
                out[entry["oid"]] = entry
        return out

    @staticmethod
    def _action(entry: dict, name: str) -> dict | None:
        action = entry.get("actions", {}).get(name)
        if action is None:
            return None
        if not isinstance(action, dict) or not isinstance(action.get("href"), str) or \
                not isinstance(action.get("header", {}), dict):
            raise TransferFailed(f"the lfs server sent a malformed '{name}' action for {entry['oid']}")
        return action

    def _retrying(self, method: str, url: str, body, headers: dict, sink=None, reset=None):
        """A transfer request, tried again (as git-lfs does) while the server answers 5xx (a
        sink only ever sees a 2xx body)."""
        for attempt in range(_TRIES):
            status, answer = self.http.request(method, url, body, headers, sink=sink, reset=reset)
            if status < 500 or attempt == _TRIES - 1:
                return status, answer
            time.sleep(0.1 * 2 ** attempt)
        return status, answer

    def _run(self, work, items: list, advance) -> int:
        """``work`` on each item, a few at a time; the sum of what it returned."""
        total = 0
        if items:
            with ThreadPoolExecutor(self.transfers) as pool:
                for n in pool.map(work, items):
                    advance(1)
                    total += n
        return total

    @staticmethod
    def _headers(action: dict) -> dict:
        return {str(k): str(v) for k, v in action.get("header", {}).items()}

    # -- upload -----------------------------------------------------------------------
    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        store.ensure(oids)
        sent = 0
        with progress.task("uploading objects", len(oids)) as advance:
            for start in range(0, len(oids), BATCH):
                part = oids[start:start + BATCH]
                sizes = {o: decoded_size(store.frame(o), o) for o in part}
                answer = self._batch("upload", list(sizes.items()))
                todo = []
                for oid in part:
                    entry = answer.get(oid)
                    if entry is None or "error" in entry:
                        error = entry.get("error") if entry else None
                        msg = error.get("message", "no message") if isinstance(error, dict) else error or "no answer"
                        raise TransferFailed(f"the lfs server at {self.http.host} refused object {oid}: "
                                             f"{lfsauth.clean(str(msg))}")
                    action = self._action(entry, "upload")
                    if action is None:
                        self.record_sizes[oid] = sizes[oid]  # the server has it already
                        advance(1)
                    else:
                        todo.append((oid, sizes[oid], action, self._action(entry, "verify")))

                def put(item) -> int:
                    oid, size, action, verify = item
                    data = store.get(oid, size=size)  # the raw bytes, checked against their name
                    status, body = self._retrying("PUT", action["href"], data, {
                        **self._headers(action), "Content-Type": "application/octet-stream",
                        "Content-Length": str(len(data))})
                    if not 200 <= status < 300:
                        raise TransferFailed(f"uploading {oid} to the lfs server at {self.http.host} failed: "
                                             f"HTTP {status} {lfsauth._message(body)}")
                    if verify is not None:
                        self.http.post_json(verify["href"], {"oid": oid, "size": size}, self._headers(verify),
                                            answer=False)
                    self.record_sizes[oid] = size
                    return size

                sent += self._run(put, todo, advance)
        return sent

    # -- download ----------------------------------------------------------------------
    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        if not self.fresh and any(o not in self.sizes for o in oids):
            self.refresh()
        wanted = [o for o in dict.fromkeys(oids) if o in self.sizes and OID_RE.match(o) and not store.has(o)]
        with progress.task("fetching objects", len(wanted)) as advance:
            for start in range(0, len(wanted), BATCH):
                part = [(o, self.sizes[o]) for o in wanted[start:start + BATCH]]
                answer = self._batch("download", part)
                todo = [(o, n, a) for o, n in part if (a := self._action(answer.get(o, {"oid": o}), "download"))]
                advance(len(part) - len(todo))  # the server lacks them: they stay missing here

                def get(item) -> int:
                    oid, size, action = item
                    self._fetch_one(store, oid, size, action)
                    return 0

                self._run(get, todo, advance)

    def _fetch_one(self, store: SideStore, oid: str, size: int, action: dict) -> None:
        """GET one object, re-hash it, and only then store it."""
        data = bytearray()
        digest = hashlib.sha256()

        def reset() -> None:  # a broken connection: the retry starts over
            nonlocal digest
            del data[:]
            digest = hashlib.sha256()

        def sink(chunk: bytes) -> None:
            if len(data) + len(chunk) > size:
                raise CorruptObject(f"side-store object {oid} from the lfs server at {self.http.host} is corrupt "
                                    f"(more than the {size} bytes recorded); nothing was stored")
            data.extend(chunk)
            digest.update(chunk)

        status, body = self._retrying("GET", action["href"], None, self._headers(action), sink=sink, reset=reset)
        if not 200 <= status < 300:
            raise TransferFailed(f"downloading {oid} from the lfs server at {self.http.host} failed: "
                                 f"HTTP {status} {lfsauth._message(body)}")
        if len(data) != size or digest.hexdigest() != oid:
            raise CorruptObject(f"side-store object {oid} from the lfs server at {self.http.host} is corrupt "
                                f"(its bytes do not hash to its name); nothing was stored")
        store.put(bytes(data), oid=oid)

