"""Chunks stored raw: served from the side store's file in place, checked, never decoded.

Content that does not compress (media, archives, weights, random data) is stored
by zstd in raw blocks: each block's bytes as they are, after a 3-byte header. For
such a frame the mount needs no decoder: ``mapped`` maps the store's file
read-only, finds the blocks (``raw_blocks``) and checks their bytes against the
frame's content checksum (the low 32 bits of their XXH64, which is what the zstd
decoder checks), and a read is answered with views of the file's pages
(``Spans``). The kernel then copies each byte once, from the store's page cache
into the mounted file's; decoding copied it twice more (reading the frame, then
decoding it) into memory of the daemon's own. Any other frame (a compressed or
RLE block, a dictionary, no checksum, bytes after the frame, a content size that
is not the chunk's) is left to the decoder (``SideStore.get``), and so is an
object not in the store's directory (one a transport holds elsewhere, re-hashed
on its first read) and every object when ``pf.rehashReads`` asks for sha256.

Store files are written once and renamed into place, never changed (a rewrite or
a gc unlinks the old file, which a mapping outlives). Knows nothing of FUSE.
"""
from __future__ import annotations

import bisect
import mmap
import os

import xxhash

from git_pf.core.errors import CorruptObject
from git_pf.store.frames import decoded_size, stored_bound
from git_pf.store.large import Chunk
from git_pf.store.sidestore import SideStore

MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first four bytes
BLOCK_MAX = 128 * 1024  # the largest block a zstd frame may have
MAP_MIN = 64 * 1024  # smaller chunks are decoded: a mapping of their own costs more than the copy
_FCS_BYTES = (0, 2, 4, 8)  # the frame content size's bytes, by its flag (flag 0: 1 byte in a single segment)


class Spans:
    """A chunk's bytes as views of its raw blocks, in order (``len`` is the chunk's size)."""

    __slots__ = ("views", "starts", "size")

    def __init__(self, views: list):
        self.views, self.starts, pos = views, [], 0
        for v in views:
            self.starts.append(pos)
            pos += len(v)
        self.size = pos

    def __len__(self) -> int:
        return self.size

    def cut(self, lo: int, hi: int) -> list:
        """The bytes from ``lo`` to ``hi`` as views of the blocks that hold them (no copy)."""
        out = []
        i = max(bisect.bisect_right(self.starts, lo) - 1, 0)
        while i < len(self.views) and self.starts[i] < hi:
            v, at = self.views[i], self.starts[i]
            a, b = max(lo - at, 0), min(hi - at, len(v))
            out.append(v[a:b] if a or b < len(v) else v)
            i += 1
        return out


def raw_blocks(frame, size: int) -> tuple[list, int] | None:
    """``(views of the block bytes, the checksum the frame declares)`` when ``frame`` is one
    zstd frame, with a content checksum and no dictionary, whose blocks are all raw and add
    up to ``size`` bytes (its declared content size, if any, too); else None."""
    view = memoryview(frame)
    n = len(view)
    if n < 12 or view[:4] != MAGIC:
        return None
    fhd = view[4]
    if fhd & 0x0B or not fhd & 0x04:  # reserved bit, dictionary id; or no checksum
        return None
    single, fcs_flag = fhd & 0x20, fhd >> 6
    pos = 5 if single else 6  # the window descriptor is there only without a single segment
    fcs_len = _FCS_BYTES[fcs_flag] or (1 if single else 0)
    if fcs_len:
        declared = int.from_bytes(view[pos:pos + fcs_len], "little") + (256 if fcs_len == 2 else 0)
        if declared != size:
            return None
        pos += fcs_len
    blocks, total = [], 0
    while True:
        if pos + 3 > n:
            return None
        head = int.from_bytes(view[pos:pos + 3], "little")
        kind, length = (head >> 1) & 3, head >> 3
        pos += 3
        if kind != 0 or length > BLOCK_MAX or pos + length > n:
            return None
        if length:
            blocks.append(view[pos:pos + length])
        pos += length
        total += length
        if total > size:
            return None
        if head & 1:  # the last block
            break
    if total != size or pos + 4 != n:
        return None
    return blocks, int.from_bytes(view[pos:], "little")


def mapped(store: SideStore, chunk: Chunk) -> Spans | None:
    """``chunk`` as views of its raw blocks in the store's file, checked against the frame's
    checksum; None when the decoder must serve it (see the module). CorruptObject when the
    blocks' bytes do not match the checksum, or the size is refused (``pf.maxFrameSize``)."""
    if store.rehash_reads or chunk.size < MAP_MIN:
        return None
    try:  # missing, unreadable or not mappable: the decoder's read fetches it or says why
        fd = os.open(store.path_for(chunk.oid), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        n = os.fstat(fd).st_size
        if not chunk.size < n <= stored_bound(chunk.size):
            return None  # compressed (or not this chunk's): the decoder says which
        # mapped with every page at once (one call instead of a fault per 16 pages)
        frame = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = raw_blocks(frame, chunk.size)
    if found is None:
        return None
    decoded_size(frame, chunk.oid, chunk.size)  # the size limits a decoded read keeps
    blocks, declared = found
    digest = xxhash.xxh64()
    for block in blocks:
        digest.update(block)
    if digest.intdigest() & 0xFFFFFFFF != declared:
        raise CorruptObject(f"side-store object {chunk.oid} is corrupt (its content checksum does not match)")
    return Spans(blocks)
