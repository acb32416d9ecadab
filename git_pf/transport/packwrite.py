"""Writing many blobs into git's object database as one pack, fast.

libgit2 writes loose objects through zlib at ~40 MB/s; side-store objects are
already zstd-compressed, so this writes them as one pack file whose entries
use stored deflate blocks (written around the data with ``writev``, not
copied), plus its version-2 ``.idx``, straight into ``objects/pack/``. The
checksums run on other threads while the data is written. Knows nothing of
the side store or refs.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from .. import writeback
from ..packfile import BLOB, entry_header, idx_bytes, object_id

_STORED = 65535  # the most bytes one stored deflate block holds
_WRITEBACK_STEP = 32 * 1024 * 1024
_IOV_MAX = 1024  # pieces one writev takes (the kernel's IOV_MAX)
_CHECKSUM_BACKLOG = 8  # entries written but not yet checksummed


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


def _writev(fd: int, pieces: list) -> None:
    """Write every piece, in order, with as few system calls as the kernel allows."""
    pieces = [p for p in pieces if len(p)]
    while pieces:
        n = os.writev(fd, pieces[:_IOV_MAX])
        while n:  # drop what was written (a short write may end inside a piece)
            if n >= len(pieces[0]):
                n -= len(pieces[0])
                pieces = pieces[1:]
            else:
                pieces = [memoryview(pieces[0])[n:], *pieces[1:]]
                n = 0


class _Checksums:
    """The pack's SHA-1 and each entry's CRC-32, computed in pack order on one other thread.

    ``add`` hands over an entry's pieces (as written); at most a few entries wait,
    so frames are not held in memory much beyond their write."""

    def __init__(self, pool: ThreadPoolExecutor, head: bytes):
        self.digest = hashlib.sha1(head)
        self.pool = pool
        self.waiting: deque = deque()

    def _feed(self, pieces: list) -> int:
        crc = 0
        for piece in pieces:
            self.digest.update(piece)
            crc = zlib.crc32(piece, crc)
        return crc

    def add(self, pieces: list, done) -> None:
        """Checksum ``pieces``; ``done(crc)`` is called, in order, once that is known."""
        self.waiting.append((self.pool.submit(self._feed, pieces), done))
        while len(self.waiting) > _CHECKSUM_BACKLOG:
            self._settle()

    def _settle(self) -> None:
        future, done = self.waiting.popleft()
        done(future.result())

    def finish(self) -> bytes:
        while self.waiting:
            self._settle()
        return self.digest.digest()


def write_blobs(git_dir: Path, blobs: Iterable[bytes], count: int | None = None) -> list[str]:
    """Write every blob of ``blobs`` into one new pack; returns their git ids in order.

    With ``count`` given, ``blobs`` may be a lazy iterator of exactly that many
    blobs (so a batch need not sit in memory at once)."""
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
    seen: set[bytes] = set()
    try:
        try:
            head = b"PACK" + struct.pack(">II", 2, count)
            _writev(fd, [head])
            offset, flushed = 12, 0
            # The blob's SHA-1 and the stream's adler32 run on two other threads, the
            # pack's SHA-1 and the entries' CRC-32 on a third, while this one writes.
            with ThreadPoolExecutor(2) as pool, ThreadPoolExecutor(1) as ordered:
                sums = _Checksums(ordered, head)
                for data in blobs:
                    view = memoryview(data)
                    blob_sha = pool.submit(blob_id, view)
                    adler = pool.submit(zlib.adler32, view)
                    pieces = [entry_header(BLOB, len(view)), b"\x78\x01", *_stored_blocks(view)]
                    _writev(fd, list(pieces))
                    trailer = struct.pack(">I", adler.result())
                    _writev(fd, [trailer])
                    pieces.append(trailer)
                    oid = blob_sha.result()
                    ids.append(oid)
                    sha = bytes.fromhex(oid)
                    if sha in seen:  # a pack may hold duplicates; the index names each once
                        sums.add(pieces, lambda crc: None)
                    else:
                        seen.add(sha)
                        sums.add(pieces, lambda crc, sha=sha, at=offset: entries.__setitem__(sha, (sha, crc, at)))
                    offset += sum(len(p) for p in pieces)
                    if offset - flushed >= _WRITEBACK_STEP:
                        writeback.start(fd, flushed, offset - flushed)  # the disk works meanwhile
                        flushed = offset
                pack_sum = sums.finish()
            if len(ids) != count:
                raise ValueError(f"pack announced {count} objects but got {len(ids)}")
            _writev(fd, [pack_sum])
            os.fsync(fd)
        finally:
            os.close(fd)
        name = pack_dir / f"pack-{pack_sum.hex()}"
        os.chmod(tmp, 0o444)
        os.replace(tmp, name.with_suffix(".pack"))
        idx_tmp = name.with_suffix(".idx.tmp")
        idx_tmp.write_bytes(idx_bytes(list(entries.values()), pack_sum))
        os.chmod(idx_tmp, 0o444)
        os.replace(idx_tmp, name.with_suffix(".idx"))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ids
