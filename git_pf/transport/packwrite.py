"""Writing many blobs into git's object database as one pack, fast.

libgit2 writes loose objects through zlib at ~40 MB/s; side-store objects are
already zstd-compressed, so this writes them as one pack file whose entries
use stored deflate blocks around the data, plus its version-2 ``.idx``,
straight into ``objects/pack/``. The pack goes out through a few staging
buffers, past the page cache where the filesystem allows it (``O_DIRECT``;
docs/transport.md "Writing packs"). Knows nothing of the side store or refs.
"""
from __future__ import annotations

import hashlib
import mmap
import os
import struct
import tempfile
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from ..core import writeback
from ..store import directio
from ..store.packfile import BLOB, entry_header, idx_bytes, object_id

_STORED = 65535  # the most bytes one stored deflate block holds
_STAGE = 8 * 1024 * 1024  # one staging buffer: hashed and written as one piece
_RING = 4  # staging buffers: one filling, the others being hashed and written
_AHEAD = 4  # blobs whose hashing is under way ahead of the writer


def _stored_blocks(view: memoryview) -> list:
    """The deflate part of a zlib stream of stored (uncompressed) blocks holding ``view``.

    Built without copying the data; the stream is ``b"\\x78\\x01"``, these
    pieces, then the big-endian adler32 of the data."""
    pieces: list = []
    n = len(view)
    for off in range(0, max(n, 1), _STORED):
        part = view[off : off + _STORED]
        final = 1 if off + _STORED >= n else 0
        pieces.append(struct.pack("<BHH", final, len(part), len(part) ^ 0xFFFF))
        pieces.append(part)
    return pieces


def blob_id(data) -> str:
    return object_id(BLOB, data).hex()


def _entry_sums(view: memoryview, head: list) -> tuple[str, bytes, int]:
    """One entry's blob id, the adler32 trailer of its zlib stream and the CRC-32 of the
    whole entry (one job: a pool works on several entries at once)."""
    trailer = struct.pack(">I", zlib.adler32(view))
    crc = 0
    for piece in head:
        crc = zlib.crc32(piece, crc)
    return blob_id(view), trailer, zlib.crc32(trailer, crc)


class _PackFile:
    """The pack being written, in order, through a ring of staging buffers.

    A full buffer is hashed (the pack's SHA-1) on one thread and written on
    another. Where the filesystem allows it the writes use ``O_DIRECT``: a pack
    is made durable at once anyway, and writing it past the page cache costs
    no CPU for page-cache pages (on a virtual machine, fresh pages are the
    dearest part of a buffered write). The last partial block goes through the
    ordinary descriptor."""

    def __init__(self, fd: int, path: str):
        self.fd, self.offset = fd, 0  # offset: bytes handed to write() so far
        self.direct = directio.open_direct(path, os.O_WRONLY)
        self.digest = hashlib.sha1()
        self._hasher, self._writer = ThreadPoolExecutor(1), ThreadPoolExecutor(1)
        self._ring = [mmap.mmap(-1, _STAGE) for _ in range(_RING)]
        self._busy: list[tuple] = [()] * _RING  # per buffer: futures still using it
        self._cur, self._fill, self._written = 0, 0, 0  # buffer in use, bytes in it, bytes dispatched

    def write(self, pieces: list) -> None:
        for piece in pieces:
            piece = memoryview(piece)
            while len(piece):
                take = min(len(piece), _STAGE - self._fill)
                self._ring[self._cur][self._fill : self._fill + take] = piece[:take]
                self._fill += take
                self.offset += take
                piece = piece[take:]
                if self._fill == _STAGE:
                    self._dispatch()

    def _dispatch(self) -> None:
        buf, n, at = self._ring[self._cur], self._fill, self._written
        view = memoryview(buf)[:n]
        hashed = self._hasher.submit(self.digest.update, view)
        written = self._writer.submit(self._pwrite, view, at)
        self._busy[self._cur] = (hashed, written)
        self._written += n
        self._cur, self._fill = (self._cur + 1) % _RING, 0
        for f in self._busy[self._cur]:  # the next buffer is free once its last use is done
            f.result()
        self._busy[self._cur] = ()

    def _pwrite(self, view: memoryview, at: int) -> None:
        if self.direct is not None:
            try:
                directio.pwrite_all(self.direct, view, at)
                return
            except OSError:  # refused after all (a block size above ALIGN): buffered from here on
                os.close(self.direct)
                self.direct = None
        directio.pwrite_all(self.fd, view, at)
        writeback.start(self.fd, at, len(view))  # the disk works meanwhile

    def finish(self) -> bytes:
        """Hash and write what is left, append the pack's SHA-1 and make the file durable."""
        buf, n, at = self._ring[self._cur], self._fill, self._written
        self._hasher.submit(self.digest.update, memoryview(buf)[:n]).result()
        for pending in self._busy:
            for f in pending:
                f.result()
        pack_sum = self.digest.digest()
        room = min(len(pack_sum), _STAGE - n)  # the checksum goes after the data, in the buffer if it fits
        buf[n : n + room] = pack_sum[:room]
        n += room
        aligned = n // directio.ALIGN * directio.ALIGN if self.direct is not None else 0
        if aligned:
            self._pwrite(memoryview(buf)[:aligned], at)
        directio.pwrite_all(self.fd, memoryview(buf)[aligned:n], at + aligned)
        directio.pwrite_all(self.fd, pack_sum[room:], at + n)
        os.fsync(self.fd)
        return pack_sum

    def close(self) -> None:
        self._hasher.shutdown(wait=True)
        self._writer.shutdown(wait=True)
        if self.direct is not None:
            os.close(self.direct)
            self.direct = None
        for buf in self._ring:
            directio.release(buf)


def write_blobs(git_dir: Path, blobs: Iterable[bytes], count: int | None = None) -> list[str]:
    """Write every blob of ``blobs`` into one new pack; returns their git ids in order.

    With ``count`` given, ``blobs`` may be a lazy iterator of exactly that many
    blobs (so a batch need not sit in memory at once). The work runs on several
    cores at once (all of it releases the GIL): the blobs' SHA-1s, the entries'
    adler32 and CRC-32 on a pool, the pack's SHA-1 and the writes on a thread each,
    while this thread only copies the entries into staging buffers."""
    if count is None:
        blobs = list(blobs)
        count = len(blobs)
    if not count:
        return []
    pack_dir = Path(git_dir) / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=pack_dir, prefix="tmp_pack_pf_")
    ids: list[str] = []
    entries: dict[bytes, tuple[bytes, int, int]] = {}
    pack = _PackFile(fd, tmp)
    try:
        pack.write([b"PACK" + struct.pack(">II", 2, count)])
        with ThreadPoolExecutor(2) as pool:
            def start(data) -> tuple:
                view = memoryview(data)
                head = [entry_header(BLOB, len(view)), b"\x78\x01", *_stored_blocks(view)]
                return head, pool.submit(_entry_sums, view, head)

            ahead: deque = deque()
            source = iter(blobs)
            while True:  # the pool works _AHEAD blobs ahead of the one being copied
                while len(ahead) < _AHEAD and (data := next(source, None)) is not None:
                    ahead.append(start(data))
                if not ahead:
                    break
                head, sums = ahead.popleft()
                offset = pack.offset
                pack.write(head)
                oid, trailer, crc = sums.result()
                pack.write([trailer])
                ids.append(oid)
                sha = bytes.fromhex(oid)
                if sha not in entries:  # a pack may hold duplicates; the index names each once
                    entries[sha] = (sha, crc, offset)
        if len(ids) != count:
            raise ValueError(f"pack announced {count} objects but got {len(ids)}")
        pack_sum = pack.finish()
        os.close(fd)
        fd = -1
        name = pack_dir / f"pack-{pack_sum.hex()}"
        os.chmod(tmp, 0o444)
        os.replace(tmp, name.with_suffix(".pack"))
        idx_tmp = name.with_suffix(".idx.tmp")
        idx_tmp.write_bytes(idx_bytes(list(entries.values()), pack_sum))
        os.chmod(idx_tmp, 0o444)
        os.replace(idx_tmp, name.with_suffix(".idx"))
    except BaseException:
        if fd >= 0:
            os.close(fd)
        Path(tmp).unlink(missing_ok=True)
        raise
    finally:
        pack.close()
    return ids
