"""The ``lfs`` adapter: side-store objects in any Git LFS server, through its batch API.

Objects go up by the sha256 and size of their raw bytes (the frame is decoded on
the way, so the server's own checks apply): ``POST <endpoint>/objects/batch``
(operation upload, transfer basic), a PUT for each object the server lacks, and
its ``verify`` action when offered. Small objects travel in bundles
(``lfsbundle``: one LFS object of many, ``pf.lfs.bundleSize``), so a large file
costs a few requests, not one per chunk; a large file whose whole content this
store hashed when the snapshot chunked it (``SideStore.hashed``) goes as one
bundle of its chunks under that hash, streamed with no second pass (``_Stream``). Downloads ask the same way (operation
download, 100 objects a request); of a bundle only the byte range holding the
wanted objects is asked for when that is under half of it (a server that
ignores ``Range`` sends it whole, and then every member is kept); every object
is re-hashed before it enters the local store (``CorruptObject`` otherwise,
and nothing is stored). A few threads move objects in parallel
(``lfs.concurrenttransfers``, as git-lfs). LFS servers want each object's size
to serve it, so the sizes of what was uploaded, and which bundle holds what,
are kept in the remote's store record (``storerecord``); that record, when it
names this endpoint, is also what ``has`` reads. Nothing is kept locally but the side store; logins come
from git's credential helpers (``lfsauth``). Touches the server, the local
store and the remembered record ref (``storerecord.listings_for``) only.
"""
from __future__ import annotations

import hashlib
import re
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor

from ...core import config, limits
from ...core.errors import CorruptObject, DataError, TransferFailed
from ...store import rawframes
from ...store.frames import OID_RE, decoded_size
from ...store.sidestore import SideStore
from .. import lfsauth, lfsbundle, pacing, storerecord
from ..objectstore import ObjectStore
from ..progress import Progress
from ..remotes import Remote

BATCH = 100
_TRIES = 4  # a transfer answered 5xx is tried again, as git-lfs does
DEFAULT_TRANSFERS = 4
_BUILDERS = 2  # threads reading and hashing units ahead of the PUTs
Built = tuple[lfsbundle.Unit, str, bytes | memoryview]  # a unit ready to go: it, its LFS oid, its bytes
_ROUND = 4 << 20  # bundle buffers are made in steps of this


class _Buffers:
    """Bundle buffers, used again once their PUT is done: memory written for the first time
    costs a page fault every 4 KiB, which took longer than decoding a bundle into it. As
    many are kept as units were ever built and not yet sent at once."""

    def __init__(self):
        self.free: list[bytearray] = []
        self.lock = threading.Lock()

    def take(self, n: int) -> bytearray:
        """A buffer of at least ``n`` bytes: the smallest free one that fits, else a new one
        (in place of the largest free one, which is too small)."""
        with self.lock:
            fits = [b for b in self.free if len(b) >= n]
            if fits:
                buf = min(fits, key=len)
                self.free.remove(buf)
                return buf
            if self.free:
                self.free.remove(max(self.free, key=len))
        return bytearray(-(-n // _ROUND) * _ROUND)

    def give(self, data) -> None:
        """Take back the buffer under a built unit's bytes (a single object's own bytes are
        not one)."""
        if isinstance(data, memoryview) and isinstance(data.obj, bytearray):
            with self.lock:
                self.free.append(data.obj)
        elif isinstance(data, bytearray):
            with self.lock:
                self.free.append(data)


class _Stream:
    """The body of a unit whose name is known (``lfsbundle.Unit.name``): its members in order,
    a run of them of about ``PIECE`` bytes at a time, ``_DEPTH`` runs ahead of the socket on
    worker threads, each member checked against its name by its frame's checksum, so a file
    of any size goes out without being held or hashed again, in few hand-offs between
    threads. A member stored raw whose file is in the page cache goes out as views of its
    mapped file (``rawframes``: checked there, never copied or decoded); any other is decoded
    into one of a few buffers used in turn. Iterated afresh for each try of the PUT; the
    first run of the first try may be read while the batch request is out (``start``)."""

    PIECE = 8 << 20
    _DEPTH = 2
    replayable = True  # lfsauth: each iteration starts from the first byte

    def __init__(self, store: SideStore, unit: lfsbundle.Unit):
        self.store, self.unit = store, unit
        self.runs: list[tuple[int, int]] = []  # (first member, end) of each run, by offset
        first = 0
        at = 0
        for i, n in enumerate(unit.sizes):
            if i > first and at + n > self.PIECE:
                self.runs.append((first, i))
                first, at = i, 0
            at += n
        self.runs.append((first, len(unit.sizes)))
        self.largest = max(sum(unit.sizes[a:b]) for a, b in self.runs)
        self.early = None  # (its buffers, the first run being read) from ``start``

    def start(self) -> None:
        """Begin reading the first run now, on a thread of its own, for the first iteration to
        take (a run never taken is dropped; a corrupt member's error comes with it)."""
        ring = self._ring()
        once = ThreadPoolExecutor(1)
        self.early = (ring, once.submit(self._load, 0, ring))
        once.shutdown(wait=False)  # its thread ends once the run is read

    def _ring(self) -> list:
        # a buffer is made only for a run with a member to decode: a file stored raw and in the
        # page cache needs none (making all four at the start wrote 32 MiB before the first byte)
        return [None] * (self._DEPTH + 2)

    def _load(self, k: int, ring: list) -> list:
        """Run ``k``: its members checked, as views (of mapped files or of a buffer of ``ring``)."""
        a, b = self.runs[k]
        unit, store = self.unit, self.store
        at, out, view = 0, [], None
        for oid, size in zip(unit.members[a:b], unit.sizes[a:b]):
            blocks = rawframes.mapped(store, oid, size, cached_only=True)
            if blocks is None:
                if view is None:
                    slot = k % len(ring)
                    if ring[slot] is None:
                        ring[slot] = bytearray(self.largest)
                    view = memoryview(ring[slot])
                out.append(store.get(oid, size=size, into=view[at:at + size]))
                at += size
            else:
                out += blocks
        return out

    def __iter__(self):
        early, self.early = self.early, None
        ring = early[0] if early is not None else self._ring()
        # run k + _DEPTH is decoded while run k goes out: _DEPTH + 2 buffers in turn never
        # hand a worker one still being sent
        with ThreadPoolExecutor(self._DEPTH) as pool:
            ahead = deque([early[1]] if early is not None else [])
            ahead.extend(pool.submit(self._load, k, ring) for k in range(len(ahead), min(self._DEPTH, len(self.runs))))
            nxt = len(ahead)
            try:
                while ahead:
                    views = ahead.popleft().result()
                    if nxt < len(self.runs):
                        ahead.append(pool.submit(self._load, nxt, ring))
                        nxt += 1
                    yield views  # one run: sent in few system calls (``lfsauth._Gathering``)
            finally:
                for f in ahead:
                    f.cancel()


_CONTENT_RANGE = re.compile(r"^bytes ([0-9]{1,16})-([0-9]{1,16})/([0-9]{1,16}|\*)$")


class LfsAdapter(ObjectStore):
    def __init__(self, repo, remote: Remote, url: str | None = None):
        self.repo, self.remote = repo, remote
        self.url = lfsauth.endpoint(repo, remote, url)
        self.http = lfsauth.Session(repo, self.url)
        self.sizes: dict[str, int] = {}  # what the remote's store record lists
        self.bundles: dict[str, tuple[str, int, int]] = {}  # object -> (bundle, its bytes, offset)
        self._members: dict[str, list[tuple[str, int]]] | None = None
        self.fresh = False
        self.record_tip = storerecord.UNASKED  # the record's tip as ``refresh`` read it
        self._asked = None  # the record's ls-remote, when ``begin_refresh`` started it
        # for the store record: objects this push found or sent, and where bundled ones lie
        self.record_sizes: dict[str, int] = {}
        self.record_bundles: dict[str, tuple[str, int, int]] = {}
        self.buffers = _Buffers()
        self.transfers = min(config.get_size(repo.git, "lfs.concurrenttransfers", DEFAULT_TRANSFERS), 32)
        self.bundle_target = max(lfsbundle.MIN_TARGET, min(
            config.get_size(repo.git, "pf.lfs.bundleSize", lfsbundle.DEFAULT_TARGET), lfsbundle.MAX_TARGET))

    @property
    def record_url(self) -> str | None:
        """The endpoint for the store record: None when a clone derives the same one from its URL."""
        return None if self.url == lfsauth.derive(self.remote.url) else self.url

    # -- what the remote holds ---------------------------------------------------
    def _where(self) -> str:
        return f"the store record of remote '{self.remote.arg}'"

    def begin_refresh(self) -> None:
        """Start the ls-remote of ``refresh``, so it runs while the push plans."""
        self._asked = storerecord.ask(self.repo, self.remote)

    def refresh(self) -> None:
        """Learn the remote's store record (one ls-remote, begun by ``begin_refresh`` when it was
        called; a fetch when it moved); its tip is kept (``record_tip``) so the push's own
        record starts from it without asking again."""
        asked, self._asked = self._asked, None
        self.record_tip = storerecord.refresh(self.repo, self.remote, asked)
        self._learn(self.record_tip)
        self.fresh = True

    def load_local(self) -> None:
        """Use the store record as last fetched (no network)."""
        self._learn(storerecord.tracked(self.repo, self.remote))

    def _learn(self, record: str | None) -> None:
        """What the record lists, when it names this endpoint; else what the last record that
        named it listed (``storerecord.listings_for``)."""
        def ours(kind: str, url: str | None) -> bool:
            return kind == "lfs" and (url or lfsauth.derive(self.remote.url) or "").rstrip("/") == self.url

        self.sizes, self.bundles = storerecord.listings_for(self.repo, self.remote, record, ours, self._where())
        self._members: dict[str, list[tuple[str, int]]] | None = None

    @property
    def members(self) -> dict[str, list[tuple[str, int]]]:
        """``{bundle: [(object, offset), ...]}`` of the record as learnt (made once: a lazy
        mount downloads many times)."""
        if self._members is None:
            self._members = lfsbundle.members_of(self.bundles)
        return self._members

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

    def _retrying(self, method: str, url: str, body, headers: dict, sink=None, reset=None, head=None,
                  expect=None):
        """A transfer request, tried again (as git-lfs does) while the server answers 5xx (a
        sink only ever sees a 2xx body)."""
        for attempt in range(_TRIES):
            status, answer = self.http.request(method, url, body, headers, sink=sink, reset=reset, head=head,
                                               expect=expect)
            if status < 500 or attempt == _TRIES - 1:
                return status, answer
            time.sleep(0.1 * 2 ** attempt)
        return status, answer

    @staticmethod
    def _headers(action: dict) -> dict:
        return {str(k): str(v) for k, v in action.get("header", {}).items()}

    # -- upload -----------------------------------------------------------------------
    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        """Send ``oids`` in the units ``lfsbundle.plan`` cuts: ``_BUILDERS`` threads build units
        (read and hash them) ahead, the ones ready are asked about in one batch request, and
        the transfer threads PUT them meanwhile; the bytes sent. Every oid is local (the push
        checked that before)."""
        try:
            return self._upload(store, oids, progress)
        finally:
            self.http.finish()

    def _upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        wholes, sizes = self._wholes(store, oids)
        sizes.update((o, decoded_size(store.frame(o), o)) for o in oids if o not in sizes)
        units = iter(lfsbundle.plan(oids, sizes, self.bundle_target, wholes))
        sent = 0
        ahead: deque = deque()  # units being built, in order
        in_flight: deque = deque()  # (unit, its PUT)
        with progress.task("uploading objects", len(oids)) as advance, \
                ThreadPoolExecutor(_BUILDERS) as builders, ThreadPoolExecutor(self.transfers) as senders:
            def build_ahead() -> None:
                while len(ahead) < _BUILDERS and (unit := next(units, None)) is not None:
                    ahead.append(builders.submit(self._build, store, unit))

            build_ahead()
            while ahead:
                group = [ahead.popleft().result()]
                while ahead and ahead[0].done() and len(group) < self.transfers:
                    group.append(ahead.popleft().result())
                build_ahead()
                for built, entry in self._ask_upload(group):
                    action = self._action(entry, "upload")
                    if action is None:  # the server has it already
                        self._recorded(built)
                        self.buffers.give(built[2])
                        advance(len(built[0].members))
                    else:
                        in_flight.append((built[0], senders.submit(self._put, built, entry, action)))
                del group
                while len(in_flight) > self.transfers or (in_flight and not ahead):
                    unit_done, future = in_flight.popleft()
                    sent += future.result()
                    advance(len(unit_done.members))
        return sent

    def _wholes(self, store: SideStore, oids: list[str]) -> tuple[list[tuple[str, tuple[str, ...]]], dict]:
        """``([(whole oid, chunks)], {chunk: size})`` of the large files among ``oids`` (by their
        chunk index) whose whole content this store hashed itself (``SideStore.hashed``): the
        index, checked against its name, gives the chunks and their sizes, which add up to the
        recorded size (each chunk is refused later unless its frame decodes to that size). A
        record that does not fit is not used: those bytes are hashed as any bundle's."""
        wholes, sizes = [], {}
        wanted = set(oids)
        for index_oid, (whole, size) in store.hashed(oids).items():
            if whole in wanted or whole in self.sizes:
                continue
            try:
                chunks = store.chunks_of(whole, size, index_oid)
            except DataError:
                continue
            wholes.append((whole, tuple(c.oid for c in chunks)))
            sizes.update((c.oid, c.size) for c in chunks if c.oid in wanted)
        return wholes, sizes

    def _build(self, store: SideStore, unit: lfsbundle.Unit) -> Built:
        """``(unit, its LFS oid, its bytes)``: one object, or a bundle of its members' bytes. A
        bundle's members are decoded one after the other into a buffer used again for later
        bundles (``_Buffers``), each hashed into the bundle's sha256 as soon as it is there,
        while it is still in the processor's cache (no second pass over the bundle)."""
        if unit.name is not None:  # a whole file, hashed when it was chunked: read as it goes out
            stream = _Stream(store, unit)
            stream.start()  # its first run is read while the batch request is out
            return unit, unit.name, stream
        if not unit.bundled:
            return unit, unit.members[0], store.get(unit.members[0], size=unit.sizes[0])
        buf = self.buffers.take(unit.size)
        try:
            view = memoryview(buf)[:unit.size]
            digest = hashlib.sha256()
            for oid, size, offset in zip(unit.members, unit.sizes, unit.offsets()):
                # checked against its name (the frame's checksum) as it is decoded
                digest.update(store.get(oid, size=size, into=view[offset:offset + size]))
        except BaseException:
            self.buffers.give(buf)
            raise
        return unit, digest.hexdigest(), view

    def _ask_upload(self, group: list[Built]) -> list[tuple[Built, dict]]:
        """One batch request for the built units of ``group``: each with the server's entry."""
        answer = self._batch("upload", [(oid, unit.size) for unit, oid, _ in group])
        out = []
        for built in group:
            oid = built[1]
            entry = answer.get(oid)
            if entry is None or "error" in entry:
                error = entry.get("error") if entry else None
                msg = error.get("message", "no message") if isinstance(error, dict) else error or "no answer"
                raise TransferFailed(f"the lfs server at {self.http.host} refused object {oid}: "
                                     f"{lfsauth.clean(str(msg))}")
            out.append((built, entry))
        return out

    def _put(self, built: Built, entry: dict, action: dict) -> int:
        """PUT one built unit and verify it when the server asks; the bytes sent."""
        unit, oid, data = built
        try:
            status, body = self._retrying("PUT", action["href"], data, {
                **self._headers(action), "Content-Type": "application/octet-stream",
                "Content-Length": str(unit.size)})
        finally:
            self.buffers.give(data)
        if not 200 <= status < 300:
            raise TransferFailed(f"uploading {oid} to the lfs server at {self.http.host} failed: "
                                 f"HTTP {status} {lfsauth._message(body)}")
        verify = self._action(entry, "verify")
        if verify is not None:
            self.http.post_json(verify["href"], {"oid": oid, "size": unit.size}, self._headers(verify),
                                answer=False)
        self._recorded(built)
        return unit.size

    def _recorded(self, built: Built) -> None:
        """Note for the store record that the server holds the unit's members (and where)."""
        unit, oid, _ = built
        for member, size, offset in zip(unit.members, unit.sizes, unit.offsets()):
            self.record_sizes[member] = size
            if unit.bundled:
                self.record_bundles[member] = (oid, unit.size, offset)

    # -- download ----------------------------------------------------------------------
    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        try:
            self._download(store, oids, progress)
        finally:
            self.http.finish()

    def _download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        if not self.fresh and any(o not in self.sizes for o in oids):
            self.refresh()
        wanted = [o for o in dict.fromkeys(oids) if o in self.sizes and OID_RE.match(o) and not store.has(o)]
        items: dict[str, tuple[int, list[str]]] = {}  # LFS object -> (its bytes, the wanted objects in it)
        for oid in wanted:
            bundle, total, _ = self.bundles.get(oid) or (oid, self.sizes[oid], 0)
            items.setdefault(bundle, (total, []))[1].append(oid)
        members = self.members
        pace = pacing.Pace(self.transfers)
        with progress.task("fetching objects", len(wanted)) as advance:
            order = list(items)
            for start in range(0, len(order), BATCH):
                part = order[start:start + BATCH]
                answer = self._batch("download", [(o, items[o][0]) for o in part])
                todo = []
                for o in part:
                    action = self._action(answer.get(o, {"oid": o}), "download")
                    if action is None:
                        advance(len(items[o][1]))  # the server lacks it: its objects stay missing here
                    else:
                        todo.append((o, action))

                def get(item) -> int:
                    lfs_oid, action = item
                    total, asked = items[lfs_oid]
                    if lfs_oid in members:
                        return self._fetch_bundle(store, lfs_oid, total, members[lfs_oid], asked, action)
                    return self._fetch_one(store, lfs_oid, total, action)

                pacing.paced(get, todo, pace, advance, lambda item: len(items[item[0]][1]))

    def _get(self, oid: str, size: int, action: dict, span: tuple[int, int] | None = None,
             cut: lfsbundle.Cutter | None = None) -> tuple[int, bytearray]:
        """GET LFS object ``oid`` of ``size`` bytes, or the bytes ``span`` of it, asked with
        ``Range``: ``(start, body)``, ``start`` being where the body begins in the object, or
        -1 when the whole object came (a server may ignore ``Range``). With ``cut`` the body
        goes to it as it arrives (checked to be the range asked before any of it), and is not
        kept: ``body`` is then empty."""
        data = bytearray()
        got = 0
        head: dict = {}
        headers = self._headers(action)
        if span is not None:
            headers["Range"] = f"bytes={span[0]}-{span[1] - 1}"

        def ranged() -> bool:
            """Whether the answer is the range asked; TransferFailed when it is another."""
            if span is None or "content-range" not in head:
                return False
            m = _CONTENT_RANGE.match(head["content-range"])
            if not m or (int(m.group(1)), int(m.group(2)) + 1) != span:
                raise TransferFailed(f"the lfs server at {self.http.host} sent a part of {oid} it was not asked for")
            return True

        def sink(chunk: bytes) -> None:
            nonlocal got
            if got + len(chunk) > size:
                raise CorruptObject(f"side-store object {oid} from the lfs server at {self.http.host} is corrupt "
                                    f"(more than the {size} bytes recorded); nothing was stored")
            if cut is None:
                data.extend(chunk)
            else:
                if not got:
                    cut.begin(span[0] if ranged() else 0)
                cut.feed(chunk)
            got += len(chunk)

        def reset() -> None:  # a retry starts over
            nonlocal got
            data.clear()
            got = 0

        status, body = self._retrying("GET", action["href"], None, headers, sink=sink, reset=reset, head=head,
                                      expect=size if span is None else span[1] - span[0])
        if not 200 <= status < 300:
            raise TransferFailed(f"downloading {oid} from the lfs server at {self.http.host} failed: "
                                 f"HTTP {status} {lfsauth._message(body)}")
        if status != 206 or span is None:
            if cut is not None and got != size:
                raise CorruptObject(f"side-store bundle {oid} from the lfs server at {self.http.host} is corrupt "
                                    f"({got} bytes, not the {size} recorded)")
            return -1, data
        if not ranged() or got != span[1] - span[0]:
            raise TransferFailed(f"the lfs server at {self.http.host} sent a part of {oid} it was not asked for")
        return span[0], data

    def _fetch_one(self, store: SideStore, oid: str, size: int, action: dict) -> int:
        """GET one object, re-hash it, and only then store it; the bytes it took."""
        if size > limits.active().max_frame:
            raise CorruptObject(f"side-store object {oid} on the lfs server at {self.http.host} is refused: the "
                                f"record says {size} bytes, over what an object may be (pf.maxFrameSize)")
        _, data = self._get(oid, size, action)
        if len(data) != size or hashlib.sha256(data).hexdigest() != oid:
            raise CorruptObject(f"side-store object {oid} from the lfs server at {self.http.host} is corrupt "
                                f"(its bytes do not hash to its name); nothing was stored")
        store.put_many([(oid, data)])
        return len(data)

    def _fetch_bundle(self, store: SideStore, bundle: str, size: int, members: list[tuple[str, int]],
                      asked: list[str], action: dict) -> int:
        """GET the part of ``bundle`` holding ``asked`` (all of it when that is most of it) and
        store every member that came, each re-hashed as soon as it is in (so neither a corrupt
        bundle nor a record that lies about one gets in, and a bundle of any size is never held
        whole: ``lfsbundle.Cutter``); the bytes it took."""
        wanted = set(asked)
        lo = min(off for m, off in members if m in wanted)
        hi = max(off + self.sizes[m] for m, off in members if m in wanted)
        span = (lo, hi) if lo < hi and 2 * (hi - lo) < size else None
        cut = lfsbundle.Cutter([(m, off, self.sizes[m]) for m, off in members if m in wanted or not store.has(m)],
                               wanted, bundle, self.http.host, store.put_many)
        start, _ = self._get(bundle, size, action, span, cut)
        cut.end()
        return size - max(start, 0) if start < 0 or span is None else span[1] - span[0]
