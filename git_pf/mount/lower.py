"""The lower layer: an image's ``world/fs`` tree as a lazy, read-only path table.

Entries are decoded from git trees on first lookup; modes, xattrs, empty
directories and pointer flags come from ``world/fs.attrs.jsonl``. File
content comes from git blobs, or, for pointer files, from the side store one
chunk at a time: a read maps to the chunks covering it, only those are
decoded (and verified; a chunk stored raw is only verified and served from the
store's file in place: ``rawchunks``), and they sit in a small LRU. A git blob over
``STREAM_ABOVE`` is never read whole: it is streamed, as far as reads reach,
into an unlinked temporary file that serves every range. A tree name
or attrs path that ``safepath`` refuses is left out (logged once), never
listed or looked up. Never writes.
"""
from __future__ import annotations

import bisect
import logging
import os
import stat
import tempfile
import threading
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import pygit2

from git_pf.image import manifest as img
from git_pf.store import pointer as pointer_fmt
from git_pf.core.errors import DataError
from git_pf.image.tree import MODE_EXEC, MODE_LINK, MODE_TREE, STREAM_ABOVE, iter_blob, read_blob, read_pointer, read_tree
from git_pf.image.safepath import relpath_problem, show, tree_name_problem
from git_pf.store.large import Chunk
from git_pf.store.sidestore import SideStore
from git_pf.layers.world import attrs as attrs_mod
from git_pf.layers.world.attrs import DEFAULT_DIR_MODE, DEFAULT_EXEC_MODE, DEFAULT_FILE_MODE
from git_pf.layers.world.names import from_tree
from git_pf.layers.world.restore import LINK_MAX

from .rawchunks import Spans, mapped

CHUNK_CACHE_BYTES = 64 * 1024 * 1024
BLOB_CACHE_BYTES = 32 * 1024 * 1024
BLOB_CACHE_ITEM = 64 * 1024
PREFETCH_AHEAD = 16  # chunks decoded ahead of a sequential reader: the 8 MiB kernel read-ahead window and more
PREFETCH_RANDOM = 1  # ... and ahead of a read that does not continue the previous one
PREFETCH_WORKERS = 2
REUSE_MAX = 8 * 1024 * 1024  # chunks up to this size are decoded into buffers used again (ChunkCache)
REUSE_STEP = 1024 * 1024  # such buffers are sized in steps of this (chunks are 128 KiB to 2 MiB)
REUSE_FREE = 8  # unused buffers kept for the next chunks
log = logging.getLogger("git_pf.mount")


@dataclass
class LEntry:
    """One lower path: its kind, git object and permission bits."""

    mode: int  # full st_mode
    oid: bytes | None  # git tree or blob id; None for an attrs-only (empty) directory
    xattrs: dict[str, bytes] = field(default_factory=dict)
    pointer: bool = False
    _size: int | None = None

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class ChunkCache:
    """Decoded side-store chunks, least recently used dropped first; safe to share between threads.

    ``prefetch`` decodes (decompress + verify) upcoming chunks on worker threads,
    so a sequential reader finds them ready; both steps release the GIL. A chunk
    is decoded once however many threads ask for it at the same time: the later
    ones wait for the first. A thread that decodes a chunk itself (``get``) never
    does anything else before the waiters have it, so no waiter can be held up
    by work that may block (a store into the page cache).

    Chunks are decoded into buffers used again (``SideStore.get(into=)``): a
    buffer whose chunk is dropped goes back to a small pool once nothing holds
    a view of it any more (a reply still being written keeps it out), so a long
    read decodes into memory that is already mapped instead of faulting in
    fresh pages for every chunk. The cache counts each buffer's whole size. A chunk stored
    raw is not decoded but kept as views of its mapped store file (``rawchunks``), counted
    at its size."""

    def __init__(self, store: SideStore, limit: int = CHUNK_CACHE_BYTES):
        self.store, self.limit, self.used = store, limit, 0
        self.items: OrderedDict[str, tuple] = OrderedDict()  # oid -> (decoded view, its buffer or None)
        self.pending: dict[str, Future] = {}
        self.pool: ThreadPoolExecutor | None = None
        self.free: list[bytearray] = []  # buffers nothing views any more, ready to decode into
        self.lock = threading.Lock()
        self.mapped = self.decoded = 0  # chunks served in place (stored raw), and decoded

    def prefetch(self, chunks: list[Chunk]) -> None:
        with self.lock:
            for c in chunks:
                if c.oid not in self.items and c.oid not in self.pending:
                    if self.pool is None:
                        self.pool = ThreadPoolExecutor(PREFETCH_WORKERS, thread_name_prefix="prefetch")
                    self.pending[c.oid] = self.pool.submit(self._decode, c)

    def get(self, chunk: Chunk):
        """The bytes of ``chunk``: a read-only view, or the ``Spans`` of a chunk stored raw;
        refused before they are decoded when its frame does not decode to the chunk's size."""
        oid = chunk.oid
        with self.lock:
            item = self.items.get(oid)
            if item is not None:
                self.items.move_to_end(oid)
                return item[0]
            fut = self.pending.get(oid)
            if fut is None:
                fut = self.pending[oid] = Future()
                mine = True
            else:
                mine = False
        if not mine:
            return fut.result()
        try:
            data = self._decode(chunk)
        except BaseException as e:
            fut.set_exception(e)
            raise
        fut.set_result(data)
        return data

    def _decode(self, chunk: Chunk):
        """Decode ``chunk`` (or map it, when its frame stores it raw: ``rawchunks``) and keep
        it; its waiters are answered by the caller's future."""
        buf = None
        try:
            data = mapped(self.store, chunk)
            if data is None:
                buf = self._buffer(chunk.size)
                data = self.store.get(chunk.oid, size=chunk.size) if buf is None else \
                    self.store.get(chunk.oid, size=chunk.size, into=buf).toreadonly()
        except BaseException:
            with self.lock:
                self.pending.pop(chunk.oid, None)
            raise
        with self.lock:
            self.pending.pop(chunk.oid, None)
            if isinstance(data, Spans):
                self.mapped += 1
            else:
                self.decoded += 1
            if chunk.oid not in self.items:
                self.items[chunk.oid] = (data, buf)
                self.used += len(data) if buf is None else len(buf)
                while self.used > self.limit and len(self.items) > 1:
                    _, (old, old_buf) = self.items.popitem(last=False)
                    self.used -= len(old) if old_buf is None else len(old_buf)
                    del old  # this view of the buffer is no longer ours to hold
                    if old_buf is not None:
                        self._release(old_buf)
            elif buf is not None:  # decoded twice meanwhile: this copy goes back when unused
                del data
                self._release(buf)
                data = self.items[chunk.oid][0]
        return data

    def _buffer(self, size: int) -> bytearray | None:
        """A buffer to decode ``size`` bytes into: the smallest free one that fits, else a new
        one; None for a chunk over ``REUSE_MAX`` (decoded into memory of its own)."""
        if size > REUSE_MAX:
            return None
        with self.lock:
            fits = [(len(b), i) for i, b in enumerate(self.free) if len(b) >= size]
            if fits:
                return self.free.pop(min(fits)[1])  # by position: equal buffers compare equal
        return bytearray(max(1, -(-size // REUSE_STEP)) * REUSE_STEP)

    def _release(self, buf: bytearray) -> None:
        """Put ``buf`` in the pool if nothing views it any more (called with the lock held). A
        buffer still viewed (a reply being written from it) is left to the garbage collector."""
        try:  # a bytearray cannot shrink while a view of it exists
            del buf[-1:]
        except BufferError:
            return
        buf.append(0)  # back to its size, in place
        self.free.append(buf)
        if len(self.free) > REUSE_FREE:
            self.free.pop(min((len(b), i) for i, b in enumerate(self.free))[1])


class PointerReader:
    """Random access into a large file without reassembling it."""

    def __init__(self, cache: ChunkCache, ptr: pointer_fmt.Pointer):
        self.cache = cache
        self.size = ptr.size
        self.chunks = cache.store.chunks_of(ptr.oid, ptr.size, ptr.chunks)  # checked to add up to the size
        self.starts, pos = [], 0
        for c in self.chunks:
            self.starts.append(pos)
            pos += c.size
        self.next_off = 0  # where a sequential reader reads next
        self.ahead = None  # a read-only mount's page-cache read-ahead state (``stream.Stream``)

    def pieces(self, off: int, size: int) -> list:
        """The bytes at ``off`` as views of the decoded chunks that hold them (no copy)."""
        out = []
        i = bisect.bisect_right(self.starts, off) - 1
        end = off + size
        while 0 <= i < len(self.chunks) and self.starts[i] < end:
            data = self.cache.get(self.chunks[i])
            lo, hi = max(off - self.starts[i], 0), end - self.starts[i]
            if type(data) is Spans:  # a chunk stored raw: views of its blocks in the store's file
                out += data.cut(lo, hi)
            else:
                out.append(memoryview(data)[lo:hi] if lo or hi < len(data) else data)
            i += 1
        return out

    def read(self, off: int, size: int) -> list:
        """``pieces`` of the read, after ``plan``."""
        self.plan(off, size)
        return self.pieces(off, size)

    def plan(self, off: int, size: int) -> None:
        """Have the chunks after a read decoded ahead: many when it continues the previous
        read, one when it jumps (does not wait for anything)."""
        i = bisect.bisect_right(self.starts, off + size - 1)
        ahead = PREFETCH_AHEAD if off == self.next_off else PREFETCH_RANDOM
        self.next_off = off + size
        self.cache.prefetch(list(self.chunks[i : i + ahead]))


class BlobReader:
    def __init__(self, data: bytes):
        self.data = data

    def read(self, off: int, size: int) -> bytes:
        return self.data[off : off + size]


class StreamReader:
    """A large git blob: streamed once (``iter_blob``), only as far as reads reach, into an
    unlinked temporary file that serves every range; never held in memory."""

    def __init__(self, git: pygit2.Repository, oid: bytes, size: int):
        self.size, self.have = size, 0
        self.stream = iter_blob(git, oid, size)
        self.spill = tempfile.TemporaryFile(prefix="pf-blob-")
        self.lock = threading.Lock()

    def read(self, off: int, size: int) -> bytes:
        end = min(off + size, self.size)
        with self.lock:
            while self.have < end:
                chunk = next(self.stream, None)
                if chunk is None:
                    raise DataError("lower file ended early")
                os.pwrite(self.spill.fileno(), chunk, self.have)
                self.have += len(chunk)
        return os.pread(self.spill.fileno(), max(end - off, 0), off)


class Lower:
    """The world of one image, looked up by real (unescaped) relative path."""

    def __init__(self, git: pygit2.Repository, store: SideStore, image_id: str):
        self.git, self.store, self.image_id = git, store, image_id
        self.odb = git.odb
        commit = git.get(image_id)
        self.mtime_ns = commit.commit_time * 1_000_000_000
        tree = commit.tree_id.hex if hasattr(commit.tree_id, "hex") else str(commit.tree_id)
        world = img.subtree(git, tree, img.WORLD_FS)
        self.attrs = attrs_mod.decode(img.read_file(git, tree, img.WORLD_ATTRS) or b"")
        self.chunks = ChunkCache(store)
        self.blobs: dict[bytes, bytes] = {}  # small blobs, oldest first
        self.blob_bytes = 0
        root_attrs = self.attrs.get(b"")
        self.entries: dict[bytes, LEntry] = {
            b"": LEntry(stat.S_IFDIR | (root_attrs.mode if root_attrs and root_attrs.mode is not None
                                       else DEFAULT_DIR_MODE), bytes.fromhex(world) if world else None,
                        root_attrs.xattrs if root_attrs else {})}
        self.children: dict[bytes, dict[bytes, LEntry]] = {}
        self._refused: set[bytes] = set()

    # -- lookups --------------------------------------------------------
    def get(self, path: bytes) -> LEntry | None:
        found = self.entries.get(path)
        if found is not None or path == b"":
            return found
        parent, _, name = path.rpartition(b"/")
        listing = self.listdir(parent)
        return None if listing is None else listing.get(name)

    def listdir(self, path: bytes) -> dict[bytes, LEntry] | None:
        """Name -> entry of a lower directory; None when ``path`` is not one."""
        cached = self.children.get(path)
        if cached is not None:
            return cached
        entry = self.get(path)
        if entry is None or not entry.is_dir:
            return None
        out: dict[bytes, LEntry] = {}
        if entry.oid is not None:
            for tname, mode, oid in read_tree(self.git, entry.oid):
                name = from_tree(tname)
                problem = tree_name_problem(tname) or ("a second entry of that name" if name in out else None)
                if problem:  # not listed, so it cannot be looked up either
                    self._refuse(path, tname, problem)
                    continue
                out[name] = self._entry(path + b"/" + name if path else name, mode, oid)
        prefix = path + b"/" if path else b""
        for rel in self._attr_dirs(path):
            name = rel[len(prefix):]
            if name not in out:
                out[name] = self._entry(rel, MODE_TREE, None)
        for name, e in out.items():
            self.entries[prefix + name] = e
        self.children[path] = out
        return out

    def _attr_dirs(self, path: bytes) -> list[bytes]:
        """Directories recorded only in fs.attrs (empty ones) directly inside ``path``."""
        if not hasattr(self, "_dirs_by_parent"):
            index: dict[bytes, list[bytes]] = {}
            for rel, a in self.attrs.items():
                if a.is_dir and rel:
                    if problem := relpath_problem(rel):
                        self._refuse(b"", rel, f"fs.attrs path: {problem}")
                        continue
                    index.setdefault(rel.rpartition(b"/")[0], []).append(rel)
            self._dirs_by_parent = index
        return self._dirs_by_parent.get(path, [])

    def _refuse(self, parent: bytes, name: bytes, problem: str) -> None:
        """Log once that an unsafe name of the image is left out (safepath)."""
        where = parent + b"/" + name if parent else name
        if where not in self._refused:
            self._refused.add(where)
            log.warning("image %s: left out unsafe world name '%s' (%s)", self.image_id[:12], show(where), problem)

    def _entry(self, rel: bytes, mode: int, oid: bytes | None) -> LEntry:
        a = self.attrs.get(rel)
        xattrs = a.xattrs if a else {}
        if mode == MODE_TREE:
            perm = a.mode if a and a.mode is not None else DEFAULT_DIR_MODE
            return LEntry(stat.S_IFDIR | perm, oid, xattrs)
        if mode == MODE_LINK:
            return LEntry(stat.S_IFLNK | 0o777, oid, xattrs)
        perm = DEFAULT_EXEC_MODE if mode == MODE_EXEC else DEFAULT_FILE_MODE
        if a is not None and a.mode is not None:
            perm = a.mode
        return LEntry(stat.S_IFREG | perm, oid, xattrs, bool(a and a.pointer))

    # -- content --------------------------------------------------------
    def size(self, entry: LEntry) -> int:
        if entry._size is None:
            if entry.is_dir:
                entry._size = 4096
            elif entry.pointer:
                entry._size = self._pointer(entry).size
            else:  # the object header alone: a directory listing never inflates content
                data = self.blobs.get(entry.oid)
                entry._size = len(data) if data is not None else self.odb.read_header(pygit2.Oid(raw=entry.oid))[1]
        return entry._size

    def content(self, entry: LEntry) -> bytes:
        """The whole content of a small (git blob) file, not kept here (the kernel keeps it);
        a large one through its reader."""
        data = self.blobs.get(entry.oid)
        if data is not None:
            return data
        size = self.size(entry)
        return self.odb.read(pygit2.Oid(raw=entry.oid))[1] if size <= STREAM_ABOVE else self.reader(entry).read(0, size)

    def _blob(self, oid: bytes) -> bytes:
        data = self.blobs.pop(oid, None)
        if data is None:
            data = read_blob(self.git, oid)
        if len(data) <= BLOB_CACHE_ITEM:  # kept for the open that usually follows a stat
            self.blobs[oid] = data
            self.blob_bytes += len(data)
            while self.blob_bytes > BLOB_CACHE_BYTES:
                self.blob_bytes -= len(self.blobs.pop(next(iter(self.blobs))))
        return data

    def _pointer(self, entry: LEntry) -> pointer_fmt.Pointer:
        try:
            return read_pointer(self.git, entry.oid)
        except ValueError as e:
            raise DataError(f"damaged pointer blob {entry.oid.hex()[:12]}: {e}") from None

    def readlink(self, entry: LEntry) -> bytes:
        return read_blob(self.git, entry.oid, LINK_MAX, "the longest symlink target")

    def reader(self, entry: LEntry):
        """An object with ``read(off, size)`` for a lower regular file."""
        if entry.pointer:
            return PointerReader(self.chunks, self._pointer(entry))
        size = self.size(entry)
        return BlobReader(self._blob(entry.oid)) if size <= STREAM_ABOVE else StreamReader(self.git, entry.oid, size)

    def copy_to(self, entry: LEntry, fd: int) -> None:
        """Write the whole content of a lower file into ``fd`` (for copy-up)."""
        reader = self.reader(entry)
        size, off, step = self.size(entry), 0, 4 * 1024 * 1024
        while off < size:
            data = reader.read(off, step)
            pieces = data if isinstance(data, list) else [data]
            n = sum(len(p) for p in pieces)
            if not n:
                raise DataError("lower file ended early")
            for p in pieces:
                os.write(fd, p)
            off += n
