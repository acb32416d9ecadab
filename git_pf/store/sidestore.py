"""The local side store: content-addressed, zstd-compressed objects outside git's odb.

Objects live at ``$GIT_DIR/pf/objects/<2 hex>/<62 hex>``, named by the sha256
of their raw bytes, each a single zstd frame with a content checksum, written
atomically (temp file, fsync, rename) and checked on every read: every way in
checks an object's name, so a read of a file here checks the frame's checksum
(a sha256 where the frame has none, or ``rehash_reads`` asks), and objects
held elsewhere are re-hashed the first time they are read from where they
are held (a mark the holder keeps, across processes).
Large content is split into FastCDC chunks, one object per chunk, plus a
chunk-index object when there is more than one chunk (docs/sidestore.md).
This module knows nothing of images, refs or transport; a transport plugs in
through ``SideStore.fetcher`` (fetch missing objects) and ``SideStore.held``
(objects it keeps elsewhere, looked up before the directory).
"""
from __future__ import annotations

import contextlib
import ctypes
import hashlib
import itertools
import mmap
import os
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator, Protocol

import zstandard

from .. import cores, limits, writeback
from . import directio
from .chunking import MIN_CHUNK, chunk_spans
from ..errors import CorruptObject, MissingObject, WriteFailed

OID_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 3
_WORKERS = max(2, min(8, cores.usable()))
_EARLY_WRITEBACK = 1 << 20  # frames this large start their writeback as soon as written in a batch
_READ_AHEAD = 4  # chunks iter_large decodes ahead of its caller
_MAP_MIN = 64 * 1024  # stored frames this large are mapped, not read, by ``frame``
_REUSE_MAX = 16 << 20  # frames up to this size are read into a buffer their thread reuses
_STREAM_PIECE = 1 << 20  # bytes a frame is decoded in when it is only counted or hashed
_local = threading.local()
_temp_ids = itertools.count()  # temp file names: unique within the process
_TEMP_RE = re.compile(r"^obj-([1-9][0-9]*)-[0-9]+$")


def temp_name(n: int) -> str:
    """This process's temp file number ``n`` under ``tmp/``: ``obj-<pid>-<n>``."""
    return f"obj-{os.getpid()}-{n}"


def temp_writer(name: str) -> int | None:
    """The pid of the process that made the temp file ``name`` (see ``temp_name``), or None."""
    m = _TEMP_RE.match(name)
    return int(m.group(1)) if m else None


def _compressor(level: int = ZSTD_LEVEL, window_log: int | None = None) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    c = cache.get((level, window_log))
    if c is None:
        if window_log is None:
            c = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
        else:
            params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log,
                                                                     write_content_size=1, write_checksum=1)
            c = zstandard.ZstdCompressor(compression_params=params)
        cache[(level, window_log)] = c
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def syncfs(path: Path) -> bool:
    """Flush the whole filesystem holding ``path`` (Linux ``syncfs``); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
    except (OSError, AttributeError):
        return False
    try:
        return getattr(libc, "syncfs", None) is not None and libc.syncfs(fd) == 0
    finally:
        os.close(fd)


def _zstd_problem(e: zstandard.ZstdError) -> str:
    return "its content checksum does not match" if "checksum" in str(e) else "it does not decode as a zstd frame"


def _stream(frame, stop: int, sink: Callable | None = None) -> int:
    """Decode ``frame`` a piece at a time (nothing kept unless ``sink`` keeps it), handing each
    piece to ``sink``; the bytes it decodes to, or ``stop + 1`` once it goes past ``stop``."""
    total = 0
    with _decompressor().stream_reader(frame, read_size=_STREAM_PIECE) as reader:
        while total <= stop:
            piece = reader.read(min(_STREAM_PIECE, stop + 1 - total))
            if not piece:
                break
            total += len(piece)
            if sink is not None:
                sink(piece)
    return min(total, stop + 1)


def decoded_size(frame, oid: str, size: int | None = None, at_most: int | None = None) -> int:
    """The bytes ``frame`` (of object ``oid``) decodes to, found before any of them is kept:
    its header's content size, or, for a frame that does not declare one, a count while
    decoding it into nothing. CorruptObject when that differs from ``size`` (what the caller
    expects: a pointer's, a chunk index entry's, a tensor's or a KV page's size) or passes
    ``at_most`` or ``pf.maxFrameSize``; ZstdError when the header does not parse."""
    limit = limits.active().max_frame
    cap = limit if at_most is None else min(at_most, limit)
    if size is not None and size > cap:
        raise CorruptObject(f"side-store object {oid} is refused: {size} bytes expected, over the "
                            f"{cap} bytes a read may inflate (pf.maxFrameSize)")
    declared = zstandard.frame_content_size(frame)
    stop = cap if size is None else size
    n = declared if declared >= 0 else _stream(frame, stop)
    shown = f"more than {stop}" if declared < 0 and n > stop else str(n)
    if size is not None and n != size:
        raise CorruptObject(f"side-store object {oid} is corrupt (it inflates to {shown} bytes, {size} expected)")
    if n > cap:
        raise CorruptObject(f"side-store object {oid} is refused: it inflates to {shown} bytes, over the "
                            f"{cap} bytes a read may inflate (pf.maxFrameSize)")
    return n


def verify_frame(oid: str, frame) -> None:
    """Check a zstd frame received from elsewhere: CorruptObject unless it decodes, within
    ``pf.maxFrameSize``, to bytes that hash to ``oid``. Decoded a piece at a time, so it
    costs no memory for its content."""
    try:
        n = decoded_size(frame, oid)
        digest = hashlib.sha256()
        if _stream(frame, n, digest.update) != n:
            raise CorruptObject(f"object {oid[:12]} received corrupt (its size is not the one it declares)")
    except zstandard.ZstdError as e:
        raise CorruptObject(f"object {oid[:12]} received corrupt: {e}") from None
    actual = digest.hexdigest()
    if actual != oid:
        raise CorruptObject(f"object {oid[:12]} received corrupt (content hashes to {actual[:12]})")


def sync_files(root: Path, paths: list[str]) -> None:
    """Make ``paths`` durable: one ``syncfs`` when the platform has it, else an fsync each."""
    if not paths or syncfs(root):
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _read_file(path: Path, transient: bool):
    """A whole object file. With ``transient`` a file of up to ``_REUSE_MAX`` bytes is read
    into this thread's ``directio`` buffer (a view valid until the thread's next read: no new
    memory to zero and fault in per object), past the page cache when it is large and not
    cached there."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if not transient:
            return _read_fd(fd, size, bytearray(size))
        view = directio.read_uncached(fd, path, 0, size)
        if view is not None:
            return view
        out = memoryview(directio.buffer(size))[:size] if size <= _REUSE_MAX else bytearray(size)
        return _read_fd(fd, size, out)
    finally:
        os.close(fd)


def _read_fd(fd: int, size: int, out):
    """Up to ``size`` bytes from the start of ``fd`` into ``out`` (a writable buffer of ``size``
    bytes); ``out`` itself, or its first bytes when the file is shorter."""
    view, got = memoryview(out), 0
    while got < size:
        n = os.preadv(fd, [view[got:]], got)
        if n == 0:
            break
        got += n
    return out if got == size else out[:got]


def _read_ahead(fn: Callable, items: list) -> Iterator:
    """``fn(item)`` for each item, in order, computed ``_READ_AHEAD`` items ahead of the
    caller on worker threads (``fn`` should release the GIL for most of its work)."""
    with ThreadPoolExecutor(_WORKERS) as pool:
        ahead = deque(pool.submit(fn, item) for item in items[:_READ_AHEAD])
        rest = iter(items[_READ_AHEAD:])
        while ahead:
            result = ahead.popleft().result()
            nxt = next(rest, None)
            if nxt is not None:
                ahead.append(pool.submit(fn, nxt))
            yield result


def sha256_hex(data) -> str:
    return hashlib.sha256(data).hexdigest()


def _has_checksum(frame) -> bool:
    """Whether a zstd frame (one that decoded) carries a content checksum, which the decoder
    then checks (the frame header descriptor's bit 2)."""
    return bool(frame[4] & 0x04)


def _frame_writer(frame) -> Callable[[int, str], bool]:
    """A ``_write_atomic`` writer of a frame through the page cache; a large one's writeback
    may start as soon as it is written."""
    def write(fd: int, tmp: str) -> bool:
        directio.pwrite_all(fd, frame, 0)
        return len(frame) >= _EARLY_WRITEBACK
    return write


def _compress_into_buffer(data, level: int, window_log: int | None) -> int:
    """Compress ``data`` (any contiguous buffer) into this thread's ``directio`` buffer; the
    frame's length. The frame is the one ``compress`` makes, content size included."""
    src = memoryview(data).cast("B")
    bound = len(src) + (len(src) >> 7) + (1 << 16)  # above zstd's worst case (compressBound)
    out, got = memoryview(directio.buffer(bound))[:bound], 0
    if len(src) < directio.MIN_BYTES:  # written buffered anyway; and a stream of nothing never ends
        frame = _compressor(level, window_log).compress(src)
        out[: len(frame)] = frame
        return len(frame)
    with _compressor(level, window_log).stream_reader(src, size=len(src)) as reader:
        while got < bound:
            n = reader.readinto(out[got:])
            if not n:
                return got
            got += n
    raise WriteFailed(f"a frame of {len(src)} bytes compressed past its bound")


class Held(Protocol):
    """Objects kept outside the store's directory (a transport's: docs/transport.md)."""

    def has(self, oid: str) -> bool: ...

    def size(self, oid: str) -> int | None: ...  # bytes of the stored frame

    def frame(self, oid: str) -> bytes | None: ...  # the stored zstd frame, unverified (no I/O when not held)

    def read(self, oid: str) -> tuple[bytes, Hashable] | None: ...  # the frame and what it was read from

    def rehashed(self, source: Hashable) -> bool: ...  # a frame read from there was re-hashed, by any process

    def mark_rehashed(self, source: Hashable) -> None: ...

    def oids(self) -> Iterator[str]: ...

    def discard(self, oid: str) -> None: ...  # found corrupt: no longer held


@dataclass(frozen=True)
class Chunk:
    oid: str
    size: int


@dataclass(frozen=True)
class LargeObject:
    """A large content item as stored: its whole-content oid, size and chunk list."""

    oid: str
    size: int
    chunks: tuple[Chunk, ...]
    index_oid: str | None  # the chunk-index object; None when there is a single chunk


def encode_chunk_index(chunks: Iterable[Chunk]) -> bytes:
    return "".join(f"{c.oid} {c.size}\n" for c in chunks).encode("ascii")


def decode_chunk_index(data: bytes) -> tuple[Chunk, ...]:
    """The chunks a chunk index lists; ValueError when a line is not ``<oid> <size>``."""
    out = []
    for line in data.decode("ascii").splitlines():
        oid, size = line.split(" ")
        if not OID_RE.match(oid) or not size.isdigit():
            raise ValueError(f"malformed chunk index line {line[:80]!r}")
        out.append(Chunk(oid, int(size)))
    return tuple(out)


def index_bound(size: int) -> int:
    """The most bytes the chunk index of content of ``size`` bytes can take: every chunk but
    the last is at least ``MIN_CHUNK`` bytes, and each line is an oid, a space, a size of at
    most as many digits as ``size`` and a newline."""
    return (size // MIN_CHUNK + 1) * (64 + 1 + len(str(size)) + 1)


class SideStore:
    """Content-addressed object store under one directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # Called with a list of missing oids before a read fails; a transport
        # sets this to fetch them in one batch (lazy fetch).
        self.fetcher: Callable[[list[str]], None] | None = None
        # Objects kept outside the directory (read-only here); a transport sets this.
        self.held: Held | None = None
        self._pending: dict[str, tuple[str, Path]] | None = None  # oid -> (temp file, final path) in a batch
        # Re-hash every read with sha256, even a checksummed frame in the directory (pf.rehashReads).
        self.rehash_reads = False

    @contextlib.contextmanager
    def batch(self):
        """Write many objects with one filesystem sync instead of an fsync each.

        Objects written inside the block go to temporary files; when it ends they
        are synced together and only then renamed into place, so a crash never
        leaves a partly written object under its name. Nested batches join the
        outer one; on an error the temporary files are removed."""
        if self._pending is not None:
            yield
            return
        self._pending = pending = {}
        try:
            yield
            sync_files(self.root, [tmp for tmp, _ in pending.values()])
            for tmp, final in pending.values():
                os.chmod(tmp, 0o444)
                os.replace(tmp, final)
        except BaseException as e:
            for tmp, _ in pending.values():
                Path(tmp).unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise WriteFailed(f"cannot write to the side store: {e.strerror or e}") from None
            raise
        finally:
            self._pending = None

    # -- single objects -------------------------------------------------
    def path_for(self, oid: str) -> Path:
        return self.root / oid[:2] / oid[2:]

    def has(self, oid: str) -> bool:
        pending = self._pending
        return (pending is not None and oid in pending) or self.path_for(oid).is_file() or \
            (self.held is not None and self.held.has(oid))

    def _readable_path(self, oid: str) -> Path:
        pending = self._pending
        if pending is not None and oid in pending:
            return Path(pending[oid][0])
        return self.path_for(oid)

    def put(self, data, oid: str | None = None, level: int = ZSTD_LEVEL, direct: bool = False,
            window_log: int | None = None) -> str:
        """Store ``data``; returns its oid. A no-op when the object exists.

        ``level`` is the zstd level of the frame and ``window_log`` its window (blocks
        are at most that size, each with its own entropy tables); any choice reads
        back the same. ``direct`` writes a large frame past the page cache
        (``directio``): for bulk data that is not read back soon."""
        if oid is None:
            oid = sha256_hex(data)
        if self.has(oid):
            return oid
        if direct:  # compressed straight into the aligned buffer the write goes out from
            self._write_atomic(oid, lambda fd, tmp: directio.write_new_from_buffer(
                fd, tmp, _compress_into_buffer(data, level, window_log)))
        else:
            self._write_atomic(oid, _frame_writer(_compressor(level, window_log).compress(data)))
        return oid

    def put_compressed(self, oid: str, frame: bytes) -> None:
        """Store a zstd frame received from elsewhere after checking it decodes to ``oid``."""
        verify_frame(oid, frame)
        if not self.has(oid):
            self._write_atomic(oid, _frame_writer(frame))

    def copy_frame(self, oid: str, frame) -> None:
        """Store the frame of ``oid`` as another store's directory holds it, unchecked: only for
        a frame whose name that store checked on its way in (held frames go through
        ``put_compressed``)."""
        if not self.has(oid):
            self._write_atomic(oid, _frame_writer(frame))

    def get(self, oid: str, rehash: bool = False, size: int | None = None, at_most: int | None = None) -> bytes:
        """The checked raw bytes of ``oid``; raises MissingObject / CorruptObject.

        Nothing is inflated before the frame's decoded size is known to be ``size`` (when
        the caller knows what to expect) and within ``at_most`` and ``pf.maxFrameSize``
        (``decoded_size``): a frame that says otherwise is refused, not decoded. A held object
        is unlisted for that only while it was never re-hashed (unverified, fetched again by a
        later read); one that was is kept, since then the pointer is what lies.

        A frame in the directory got there under a checked name (``put`` hashes what it
        stores, received frames are verified first), so its read checks the frame: the
        decoder checks its content checksum, and a frame without one is re-hashed. An object
        held elsewhere (fetched by git under a name a remote gave) is re-hashed the first
        time it is read from where it is held (``held`` keeps that mark, for every process),
        and checked like the directory's after that; ``rehash`` and ``rehash_reads`` re-hash
        every read (docs/sidestore.md)."""
        try:
            frame, source = self._frame(oid, transient=True)
        except MissingObject:
            self.ensure([oid])  # fetched, else MissingObject
            frame, source = self._frame(oid, transient=True)
        held = source is not None
        known = held and self.held.rehashed(source)  # re-hashed from there before
        try:
            n = decoded_size(frame, oid, size, at_most)
        except CorruptObject:
            if held and not known:
                self.held.discard(oid)
            raise
        except zstandard.ZstdError as e:
            if held:
                self.held.discard(oid)
            raise CorruptObject(f"side-store object {oid} is corrupt ({_zstd_problem(e)})") from None
        try:
            data = _decompressor().decompress(frame, max_output_size=n)
            full = rehash or self.rehash_reads or not _has_checksum(frame) or (held and not known)
            if full and sha256_hex(data) != oid:
                raise CorruptObject(f"side-store object {oid} is corrupt (content does not hash to its name)")
        except (zstandard.ZstdError, CorruptObject) as e:
            if held:
                self.held.discard(oid)  # unlisted: the next read fetches it again
            if isinstance(e, CorruptObject):
                raise
            raise CorruptObject(f"side-store object {oid} is corrupt ({_zstd_problem(e)})") from None
        if held and not known:
            self.held.mark_rehashed(source)
        return data

    def _frame(self, oid: str, transient: bool = False) -> tuple[bytes, Hashable | None]:
        """``(stored frame, where held)``: what ``held`` keeps (and where it read it from),
        else the file (None).

        With ``transient`` the frame may be a view of this thread's ``directio``
        buffer (a large file not in the page cache is read past it), valid until
        the thread's next read."""
        found = self.held.read(oid) if self.held is not None else None
        if found is not None:
            return found
        try:
            return _read_file(self._readable_path(oid), transient), None
        except FileNotFoundError:
            raise MissingObject(f"side-store object {oid} is missing") from None

    def frame(self, oid: str):
        """The stored zstd frame of ``oid`` as is (not verified): a file of ``_MAP_MIN`` bytes
        or more is mapped read-only rather than read (no copy; readers such as the push's
        hashing threads read the page cache in place)."""
        self.ensure([oid])
        return self._stored_frame(oid)

    def iter_frames(self, oids: list[str]) -> Iterator[memoryview]:
        """The stored frames of ``oids`` in order, as ``frame`` gives them, read a few ahead of
        the caller on worker threads (fetched first in one batch where missing)."""
        self.ensure(oids)
        yield from _read_ahead(self._stored_frame, oids)

    def _stored_frame(self, oid: str) -> memoryview:
        try:
            fd = os.open(self._readable_path(oid), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return memoryview(self._frame(oid)[0])
        try:
            size = os.fstat(fd).st_size
            if size < _MAP_MIN:
                return memoryview(_read_fd(fd, size, bytearray(size)))
            return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)

    def frame_size(self, oid: str) -> int | None:
        """Bytes of the stored frame of ``oid``; None when it is not here."""
        try:
            return self._readable_path(oid).stat().st_size
        except FileNotFoundError:
            return self.held.size(oid) if self.held is not None else None

    def ensure(self, oids: Iterable[str]) -> None:
        """Make every oid local, asking ``fetcher`` for the missing ones in one batch."""
        missing = [o for o in oids if not self.has(o)]
        if missing and self.fetcher is not None:
            self.fetcher(missing)
        for o in missing:
            if not self.has(o):
                raise MissingObject(f"side-store object {o} is missing")

    def iter_oids(self) -> Iterator[str]:
        """Every object here: the directory's, then those only ``held`` keeps."""
        files = set()
        if self.root.is_dir():
            for d in sorted(self.root.iterdir()):
                if len(d.name) != 2 or not d.is_dir():
                    continue
                for f in sorted(d.iterdir()):
                    oid = d.name + f.name
                    if OID_RE.match(oid):
                        files.add(oid)
                        yield oid
        if self.held is not None:
            yield from (o for o in self.held.oids() if o not in files)

    def remove(self, oid: str) -> None:
        self.path_for(oid).unlink(missing_ok=True)

    def _write_atomic(self, oid: str, write: Callable[[int, str], bool | None]) -> None:
        """Write one object: ``write(fd, temp path)`` fills a new temp file (and answers whether
        its writeback may start at once), then (outside a batch) fsync and rename."""
        path = self.path_for(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = self._new_temp()
        try:
            try:
                early = write(fd, tmp)
                if self._pending is not None:
                    self._pending[oid] = (tmp, path)
                    if early:
                        writeback.start(fd)  # the disk works meanwhile: the batch's sync waits less
                    return
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException as e:
            try:
                os.unlink(tmp)
            except FileNotFoundError:
                pass
            if isinstance(e, OSError):
                raise WriteFailed(f"cannot write to the side store: {e.strerror or e}") from None
            raise

    def _new_temp(self) -> tuple[int, str]:
        """A new, empty temp file under ``tmp/`` (named by process and a counter, so no two
        writers share one; a name a crashed writer left is skipped): its fd and path."""
        tmpdir = self.root / "tmp"
        tmpdir.mkdir(parents=True, exist_ok=True)
        while True:
            tmp = f"{tmpdir}/{temp_name(next(_temp_ids))}"
            try:
                return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600), tmp
            except FileExistsError:
                continue

    # -- large content --------------------------------------------------
    def put_large(self, buf) -> LargeObject:
        """Chunk ``buf`` (bytes, memoryview or mmap), store every chunk, return the layout."""
        with memoryview(buf) as view:
            spans = list(chunk_spans(view))

            def store(span: tuple[int, int]) -> Chunk:
                off, n = span
                with view[off : off + n] as part:
                    return Chunk(self.put(part), n)

            whole = hashlib.sha256()
            with ThreadPoolExecutor(_WORKERS) as pool:
                futures = [pool.submit(store, span) for span in spans]
                whole.update(view)
                chunks = tuple(f.result() for f in futures)
            size = len(view)
        index_oid = self.put(encode_chunk_index(chunks)) if len(chunks) > 1 else None
        return LargeObject(whole.hexdigest(), size, chunks, index_oid)

    def chunks_of(self, oid: str, size: int, index_oid: str | None) -> tuple[Chunk, ...]:
        """The chunks of large object ``oid`` of ``size`` bytes, checked to add up to ``size``;
        CorruptObject when they do not, or when ``size`` is over ``pf.maxObjectSize``."""
        limit = limits.active().max_object
        if size > limit:
            raise CorruptObject(f"large object {oid} claims {size} bytes, over pf.maxObjectSize ({limit})")
        if index_oid is None:
            return (Chunk(oid, size),) if size else ()
        try:
            chunks = decode_chunk_index(self.get(index_oid, at_most=index_bound(size)))
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptObject(f"chunk index {index_oid} of large object {oid} is malformed ({e})") from None
        if sum(c.size for c in chunks) != size:
            raise CorruptObject(f"chunk index {index_oid} of large object {oid}: its chunk sizes do not "
                                f"add up to {size} bytes")
        return chunks

    def check_size(self, oid: str, size: int) -> None:
        """CorruptObject unless the stored frame of ``oid`` decodes to ``size`` bytes, told by
        its header (or a count, for a frame that does not declare it) without keeping any."""
        try:
            decoded_size(self.frame(oid), oid, size)
        except zstandard.ZstdError as e:
            raise CorruptObject(f"side-store object {oid} is corrupt ({_zstd_problem(e)})") from None

    def iter_large(self, oid: str, size: int, index_oid: str | None) -> Iterator[bytes]:
        """Yield the verified chunks of a large object.

        Integrity is a hash chain: the chunk index is verified against its name,
        every chunk against its name and its size against the index (whose sizes add up
        to ``size``, ``chunks_of``), so the whole content needs no second hash pass (``oid`` names the whole
        content; with a single chunk it is that chunk's name)."""
        chunks = self.chunks_of(oid, size, index_oid)
        self.ensure(c.oid for c in chunks)

        def load(c: Chunk) -> bytes:
            return self.get(c.oid, size=c.size)  # refused unless it decodes to c.size bytes

        # Chunks are read, decoded and verified a few ahead on other threads (all of
        # that releases the GIL) while the caller writes the current one.
        yield from _read_ahead(load, chunks)
