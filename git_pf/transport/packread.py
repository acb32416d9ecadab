"""Reading blobs stored as plain deflate blocks straight out of a repository's pack files.

``packwrite`` stores every blob as a zlib stream of *stored* deflate blocks,
and git keeps such entries verbatim when it transfers or copies them. The
bytes of such an entry are read straight out of the pack file (one
``preadv`` that scatters the block headers aside): no inflate, no adler32,
no mapping, one copy. A blob that is not in the page cache (a pack just
linked in from a push that wrote it past the cache) is read with ``O_DIRECT``
into a reused aligned buffer instead, so a one-time read does not fill the
page cache. That skips zlib's own checksum, so callers must check the
content themselves (side-store frames are decoded and hashed to their name
before they are used). Anything else (a compressed or delta entry, a loose
object, an unknown pack layout) gives None and the caller reads the blob
through libgit2. Reads pack and index files only; never writes.
"""
from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from ..store import directio
from ..store.packfile import BLOB as _BLOB

_IDX_MAGIC = b"\xfftOc\x00\x00\x00\x02"


_STORED = 65535  # the most bytes one stored deflate block holds
_IOV_MAX = 1024


def _entry_header(head: bytes) -> tuple[int, int, int]:
    """``(type, size, header length)`` of a pack entry starting with ``head``."""
    c = head[0]
    kind, size, shift, pos = (c >> 4) & 7, c & 0x0F, 4, 1
    while c & 0x80:
        c = head[pos]
        size |= (c & 0x7F) << shift
        shift += 7
        pos += 1
    return kind, size, pos


def _even_block(buf, at: int, i: int, n: int, size: int) -> bool:
    """Whether the stored-block header at ``buf[at:]`` is block ``i`` of ``n`` even blocks of
    a ``size``-byte blob."""
    final, length, inverse = struct.unpack_from("<BHH", buf, at)
    return final == (i == n - 1) and length == min(_STORED, size - i * _STORED) and length ^ inverse == 0xFFFF


class _Pack:
    def __init__(self, idx_path: Path):
        self.path = idx_path
        with open(idx_path, "rb") as f:
            self.idx = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        if self.idx[:8] != _IDX_MAGIC:
            self.idx.close()
            raise ValueError("not a version-2 pack index")
        self.count = struct.unpack_from(">I", self.idx, 8 + 255 * 4)[0]
        self.fd = os.open(idx_path.with_suffix(".pack"), os.O_RDONLY | os.O_CLOEXEC)

    def offset(self, sha: bytes) -> int | None:
        idx, n = self.idx, self.count
        lo = struct.unpack_from(">I", idx, 8 + (sha[0] - 1) * 4)[0] if sha[0] else 0
        hi = struct.unpack_from(">I", idx, 8 + sha[0] * 4)[0]
        names = 8 + 256 * 4
        while lo < hi:
            mid = (lo + hi) // 2
            here = idx[names + 20 * mid : names + 20 * mid + 20]
            if here == sha:
                off = struct.unpack_from(">I", idx, names + 24 * n + 4 * mid)[0]
                if off & 0x80000000:
                    off = struct.unpack_from(">Q", idx, names + 28 * n + 8 * (off & 0x7FFFFFFF))[0]
                return off
            if here < sha:
                lo = mid + 1
            else:
                hi = mid
        return None

    def stored_blob(self, off: int) -> bytearray | None:
        """The blob at ``off`` when it is a stored-block zlib stream, else None."""
        head = os.pread(self.fd, 16, off)
        if not head:
            return None
        kind, size, pos = _entry_header(head)
        if kind != _BLOB or head[pos : pos + 2] != b"\x78\x01":
            return None
        out = bytearray(size)
        start = off + pos + 2
        if self._read_uncached(start, out):
            return out
        return out if self._read_even_blocks(start, out) or self._read_blocks(start, out) else None

    def _read_uncached(self, start: int, out: bytearray) -> bool:
        """Even stored blocks not in the page cache, read past it (``directio.read_uncached``):
        the span holding them in one read, then each block's bytes copied out and its header
        checked. False: read them as usual."""
        size = len(out)
        n = max(1, -(-size // _STORED))
        buf = directio.read_uncached(self.fd, self.path.with_suffix(".pack"), start, size + 5 * n)
        if buf is None:
            return False
        dst, at = memoryview(out), 0
        for i in range(n):
            if not _even_block(buf, at, i, n, size):
                return False
            length = min(_STORED, size - i * _STORED)
            dst[i * _STORED : i * _STORED + length] = buf[at + 5 : at + 5 + length]
            at += 5 + length
        return True

    def _read_even_blocks(self, start: int, out: bytearray) -> bool:
        """Blocks of 65,535 bytes (as packwrite and zlib lay them out): read with one ``preadv``
        straight into ``out`` (no mapping, no second copy), their headers checked after."""
        size = len(out)
        n = max(1, -(-size // _STORED))
        heads = bytearray(5 * n)
        view, hv = memoryview(out), memoryview(heads)
        iov = []
        for i in range(n):
            iov += [hv[5 * i : 5 * i + 5], view[i * _STORED : (i + 1) * _STORED]]
        pos = start
        for k in range(0, len(iov), _IOV_MAX):
            group = iov[k : k + _IOV_MAX]
            want = sum(len(g) for g in group)
            if os.preadv(self.fd, group, pos) != want:
                return False
            pos += want
        return all(_even_block(heads, 5 * i, i, n, size) for i in range(n))

    def _read_blocks(self, start: int, out: bytearray) -> bool:
        """Any stored-block layout: each block's header, then its bytes into ``out``."""
        view, pos, filled = memoryview(out), start, 0
        while True:
            head = os.pread(self.fd, 5, pos)
            if len(head) < 5:
                return False
            final, length, inverse = struct.unpack("<BHH", head)
            if final not in (0, 1) or length ^ inverse != 0xFFFF or filled + length > len(out):
                return False
            if length and os.preadv(self.fd, [view[filled : filled + length]], pos + 5) != length:
                return False
            filled, pos = filled + length, pos + 5 + length
            if final:
                return filled == len(out)

    def close(self) -> None:
        self.idx.close()
        os.close(self.fd)


class PackReader:
    """The stored-block blobs of one repository's packs (as they were when it was opened)."""

    def __init__(self, git_dir: Path | None):
        self.packs: list[_Pack] = []
        if git_dir is None:
            return
        for idx_path in sorted((Path(git_dir) / "objects" / "pack").glob("pack-*.idx")):
            try:
                self.packs.append(_Pack(idx_path))
            except (OSError, ValueError):
                continue  # a pack being written or removed right now: libgit2 will read its objects

    def _find(self, blob_hex: str) -> tuple[_Pack, int] | None:
        sha = bytes.fromhex(blob_hex)
        for p in self.packs:
            off = p.offset(sha)
            if off is not None:
                return p, off
        return None

    def read(self, blob_hex: str) -> bytes | None:
        found = self._find(blob_hex)
        return found[0].stored_blob(found[1]) if found is not None else None

    def locate(self, blob_hex: str) -> Path | None:
        """The ``.idx`` of the pack holding ``blob_hex``, None when no pack does."""
        found = self._find(blob_hex)
        return found[0].path if found is not None else None

    def holds(self, blob_hex: str) -> bool:
        return self._find(blob_hex) is not None

    def close(self) -> None:
        for p in self.packs:
            p.close()
        self.packs = []

    def __enter__(self) -> "PackReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
