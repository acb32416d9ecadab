"""The local side store: content-addressed, zstd-compressed objects outside git's odb.

Objects live at ``$GIT_DIR/pf/objects/<2 hex>/<62 hex>``, named by the sha256
of their raw bytes, each a single zstd frame with a content checksum, written
atomically (temp file, fsync, rename) and checked on every read: every way in
checks an object's name, so a read of a file here checks the frame's checksum
(a sha256 where the frame has none, or ``rehash_reads`` asks), and objects
held elsewhere are re-hashed the first time they are read from where they
are held (a mark the holder keeps, across processes).
Large content is chunked by ``LargeContent`` (``large``, docs/sidestore.md);
frames are made and checked in ``frames``, object files read and written in
``objectio``; the whole-content hashes ``put_large`` computed are kept in
``hashed``.
This module knows nothing of images, refs or transport; a transport plugs in
through ``SideStore.fetcher`` (fetch missing objects) and ``SideStore.held``
(objects it keeps elsewhere, looked up before the directory).
"""
from __future__ import annotations

import contextlib
import itertools
import mmap
import os
import re
from pathlib import Path
from typing import Callable, Hashable, Iterable, Iterator, Protocol

import zstandard

from ..core import limits, writeback
from . import directio, hashed
from .frames import (OID_RE, ZSTD_LEVEL, compress_into_buffer, compressor, decode_into, decoded_size, decompressor,
                     stored_bound, has_checksum, sha256_hex, verify_frame, zstd_problem)
from .large import LargeContent
from .objectio import MAP_MIN, frame_writer, read_ahead, read_fd, read_file, sync_files
from ..core.errors import CorruptObject, MissingObject, WriteFailed

_temp_ids = itertools.count()  # temp file names: unique within the process
_TEMP_RE = re.compile(r"^obj-([1-9][0-9]*)-[0-9]+$")


def temp_name(n: int) -> str:
    """This process's temp file number ``n`` under ``tmp/``: ``obj-<pid>-<n>``."""
    return f"obj-{os.getpid()}-{n}"


def temp_writer(name: str) -> int | None:
    """The pid of the process that made the temp file ``name`` (see ``temp_name``), or None."""
    m = _TEMP_RE.match(name)
    return int(m.group(1)) if m else None



class Held(Protocol):
    """Objects kept outside the store's directory (a transport's: docs/transport.md)."""

    def has(self, oid: str) -> bool: ...

    def size(self, oid: str) -> int | None: ...  # bytes of the stored frame

    def frame(self, oid: str) -> bytes | None: ...  # the stored zstd frame, unverified (no I/O when not held)

    def read(self, oid: str, at_most: int | None = None) -> tuple[bytes, Hashable] | None: ...  # the frame
    # and what it was read from; CorruptObject, unread, when its listed size is over ``at_most``

    def rehashed(self, source: Hashable) -> bool: ...  # a frame read from there was re-hashed, by any process

    def mark_rehashed(self, source: Hashable) -> None: ...

    def oids(self) -> Iterator[str]: ...

    def discard(self, oid: str) -> None: ...  # found corrupt: no longer held


class SideStore(LargeContent):
    """Content-addressed object store under one directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        # Called with a list of missing oids before a read fails; a transport
        # sets this to fetch them in one batch (lazy fetch).
        self.fetcher: Callable[[list[str]], None] | None = None
        self.fetch_problem: str | None = None  # why the fetcher's last call left objects missing, if it knows
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
            self._publish(pending)
        except BaseException as e:
            self._drop(pending, e)
        finally:
            self._pending = None

    def put_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """Store ``(oid, raw bytes)`` pairs whose names the caller checked, synced together
        (one filesystem sync for all, as in ``batch``); unlike ``batch``, several threads may
        call it at once. On an error nothing of it stays behind."""
        pending: dict[str, tuple[str, Path]] = {}
        try:
            for oid, data in items:
                if oid not in pending and not self.has(oid):
                    pending[oid] = self._write_temp(oid, frame_writer(compressor(ZSTD_LEVEL).compress(data)))
            self._publish(pending)
        except BaseException as e:
            self._drop(pending, e)

    def _publish(self, pending: dict[str, tuple[str, Path]]) -> None:
        """Sync the written temp files together, then rename each into place."""
        sync_files(self.root, [tmp for tmp, _ in pending.values()])
        for tmp, final in pending.values():
            os.chmod(tmp, 0o444)
            os.replace(tmp, final)

    @staticmethod
    def _drop(pending: dict[str, tuple[str, Path]], error: BaseException):
        """After ``error``: remove the temp files, then raise (an OSError as one WriteFailed line)."""
        for tmp, _ in pending.values():
            Path(tmp).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise WriteFailed(f"cannot write to the side store: {error.strerror or error}") from None
        raise error

    # -- single objects -------------------------------------------------
    def path_for(self, oid: str) -> Path:
        return self.root / oid[:2] / oid[2:]

    def file_name(self, oid: str) -> str:
        """``path_for`` as a string, made without ``pathlib``: a push asks it of every chunk of
        a large file."""
        return f"{self.root}/{oid[:2]}/{oid[2:]}"

    def has(self, oid: str) -> bool:
        pending = self._pending
        return (pending is not None and oid in pending) or os.path.isfile(self.file_name(oid)) or \
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
                fd, tmp, compress_into_buffer(data, level, window_log)))
        else:
            self._write_atomic(oid, frame_writer(compressor(level, window_log).compress(data)))
        return oid

    def put_compressed(self, oid: str, frame: bytes) -> None:
        """Store a zstd frame received from elsewhere after checking it decodes to ``oid``."""
        verify_frame(oid, frame)
        if not self.has(oid):
            self._write_atomic(oid, frame_writer(frame))

    def receive_frame(self, oid: str, pieces: Iterable[bytes]) -> None:
        """Store a zstd frame arriving in ``pieces`` (from a network body, say) without holding
        it in memory: written to a temp file of the store, synced, checked (mapped) to decode
        to ``oid``, and only then renamed into place; on any error nothing stays behind."""
        path = self.path_for(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = self._new_temp()
        try:
            try:
                at = 0
                for piece in pieces:
                    directio.pwrite_all(fd, piece, at)
                    at += len(piece)
                os.fsync(fd)
            finally:
                os.close(fd)
            with open(tmp, "rb") as fh:  # the temp was opened write-only: map it afresh
                frame = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if at else b""
                try:
                    verify_frame(oid, frame)
                finally:
                    if at:
                        frame.close()
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException as e:
            self._drop({oid: (tmp, path)}, e)

    def copy_frame(self, oid: str, frame) -> None:
        """Store the frame of ``oid`` as another store's directory holds it, unchecked: only for
        a frame whose name that store checked on its way in (held frames go through
        ``put_compressed``)."""
        if not self.has(oid):
            self._write_atomic(oid, frame_writer(frame))

    def get(self, oid: str, rehash: bool = False, size: int | None = None, at_most: int | None = None,
            into=None) -> bytes:
        """The checked raw bytes of ``oid``; raises MissingObject / CorruptObject. With ``into``
        (a writable buffer of at least its size) they are decoded there, and a view is returned.

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
        # git compresses blobs too: a held frame is read only within what a frame of the
        # expected content can take (``stored_bound``), checked from its index entry
        limit = limits.active().max_frame
        stored = stored_bound(size if size is not None else min(at_most or limit, limit))
        try:
            frame, source = self._frame(oid, transient=True, at_most=stored)
        except MissingObject:
            self.ensure([oid])  # fetched, else MissingObject
            frame, source = self._frame(oid, transient=True, at_most=stored)
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
            raise CorruptObject(f"side-store object {oid} is corrupt ({zstd_problem(e)})") from None
        try:
            data = decompressor().decompress(frame, max_output_size=n) if into is None else \
                decode_into(frame, into, n)
            full = rehash or self.rehash_reads or not has_checksum(frame) or (held and not known)
            if full and sha256_hex(data) != oid:
                raise CorruptObject(f"side-store object {oid} is corrupt (content does not hash to its name)")
        except (zstandard.ZstdError, CorruptObject) as e:
            if held:
                self.held.discard(oid)  # unlisted: the next read fetches it again
            if isinstance(e, CorruptObject):
                raise
            raise CorruptObject(f"side-store object {oid} is corrupt ({zstd_problem(e)})") from None
        if held and not known:
            self.held.mark_rehashed(source)
        return data

    def _frame(self, oid: str, transient: bool = False, at_most: int | None = None) -> tuple[bytes, Hashable | None]:
        """``(stored frame, where held)``: what ``held`` keeps (and where it read it from; a
        held frame over ``at_most`` bytes is refused unread), else the file (None).

        With ``transient`` the frame may be a view of this thread's ``directio``
        buffer (a large file not in the page cache is read past it), valid until
        the thread's next read."""
        found = self.held.read(oid, at_most) if self.held is not None else None
        if found is not None:
            return found
        try:
            return read_file(self._readable_path(oid), transient), None
        except FileNotFoundError:
            raise MissingObject(f"side-store object {oid} is missing") from None

    def frame(self, oid: str):
        """The stored zstd frame of ``oid`` as is (not verified): a file of ``MAP_MIN`` bytes
        or more is mapped read-only rather than read (no copy; readers such as the push's
        hashing threads read the page cache in place)."""
        self.ensure([oid])
        return self._stored_frame(oid)

    def iter_frames(self, oids: list[str]) -> Iterator[memoryview]:
        """The stored frames of ``oids`` in order, as ``frame`` gives them, read a few ahead of
        the caller on worker threads (fetched first in one batch where missing)."""
        self.ensure(oids)
        yield from read_ahead(self._stored_frame, oids)

    def _stored_frame(self, oid: str) -> memoryview:
        try:
            fd = os.open(self._readable_path(oid), os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return memoryview(self._frame(oid)[0])
        try:
            size = os.fstat(fd).st_size
            if size < MAP_MIN:
                return memoryview(read_fd(fd, size, bytearray(size)))
            return memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
        finally:
            os.close(fd)

    def record_hashed(self, index_oid: str, whole: str, size: int) -> None:
        """Note that the chunks listed by ``index_oid`` are ``size`` bytes hashing to ``whole``,
        hashed here (``hashed``): only ``put_large`` calls it."""
        hashed.write(self.root, index_oid, whole, size)

    def hashed(self, index_oids) -> dict[str, tuple[str, int]]:
        """``{chunk index oid: (whole oid, size)}`` this store hashed itself (``hashed``)."""
        return hashed.read(self.root, index_oids)

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
        if self._pending is not None:
            self._pending[oid] = self._write_temp(oid, write)
            return
        path = self.path_for(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = self._new_temp()
        try:
            try:
                write(fd, tmp)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.chmod(tmp, 0o444)
            os.replace(tmp, path)
        except BaseException as e:
            self._drop({oid: (tmp, path)}, e)

    def _write_temp(self, oid: str, write: Callable[[int, str], bool | None]) -> tuple[str, Path]:
        """A temp file filled by ``write`` (its writeback started when ``write`` allows), not
        synced: ``(temp path, final path)`` for ``_publish``."""
        path = self.path_for(oid)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = self._new_temp()
        try:
            try:
                if write(fd, tmp):
                    writeback.start(fd)  # the disk works meanwhile: the later sync waits less
            finally:
                os.close(fd)
        except BaseException as e:
            self._drop({oid: (tmp, path)}, e)
        return tmp, path

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
