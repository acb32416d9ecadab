"""Frames stored raw: read in place from the store's file, checked, never decoded.

Content that does not compress (media, archives, weights, random data) is stored
by zstd in raw blocks: each block's bytes as they are, after a 3-byte header. For
such a frame no decoder is needed: ``mapped`` maps the store's file read-only,
finds the blocks (``raw_blocks``) and checks their bytes against the frame's
content checksum (the low 32 bits of their XXH64, which is what the zstd decoder
checks), and hands back views of the file's pages. Decoding would copy each byte
twice more (reading the frame, then decoding it). Any other frame (a compressed
or RLE block, a dictionary, no checksum, bytes after the frame, a content size
that is not the object's) is left to the decoder (``SideStore.get``), and so is
an object not in the store's directory (one a transport holds elsewhere,
re-hashed on its first read) and every object when ``pf.rehashReads`` asks for
sha256. Store files are written once and renamed into place, never changed (a
rewrite or a gc unlinks the old file, which a mapping outlives). Used by the
mount (its reads) and the lfs push (its whole files).
"""
from __future__ import annotations

import mmap
import os

import xxhash

from ..core.errors import CorruptObject
from . import directio
from .frames import decoded_size, stored_bound

MAGIC = b"\x28\xb5\x2f\xfd"  # a zstd frame's first four bytes
BLOCK_MAX = 128 * 1024  # the largest block a zstd frame may have
MAP_MIN = 64 * 1024  # smaller objects are decoded: a mapping of their own costs more than the copy
_FCS_BYTES = (0, 2, 4, 8)  # the frame content size's bytes, by its flag (flag 0: 1 byte in a single segment)


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


def mapped(store, oid: str, size: int, cached_only: bool = False) -> list | None:
    """The ``size`` bytes of ``oid`` as views of the raw blocks of its file in ``store``'s
    directory, checked against the frame's checksum; None when the decoder must read it (see
    the module), or, with ``cached_only``, when the file's pages are not in the page cache
    (mapping them would take a page-cache page for every 4 KiB read, which a read past the
    cache does not: ``directio``). CorruptObject when the blocks' bytes do not match the
    checksum, or the size is refused (``pf.maxFrameSize``)."""
    if store.rehash_reads or size < MAP_MIN:
        return None
    try:  # missing, unreadable or not mappable: the decoder's read fetches it or says why
        fd = os.open(store.file_name(oid), os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        n = os.fstat(fd).st_size
        if not size < n <= stored_bound(size) or (cached_only and not directio.cached(fd, n // 2)):
            return None  # compressed (or not this object's): the decoder says which
        # mapped with every page at once (one call instead of a fault per 16 pages)
        frame = mmap.mmap(fd, n, flags=mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0), prot=mmap.PROT_READ)
    except OSError:
        return None
    finally:
        os.close(fd)
    found = raw_blocks(frame, size)
    if found is None:
        return None
    decoded_size(frame, oid, size)  # the size limits a decoded read keeps
    blocks, declared = found
    digest = xxhash.xxh64()
    for block in blocks:
        digest.update(block)
    if digest.intdigest() & 0xFFFFFFFF != declared:
        raise CorruptObject(f"side-store object {oid} is corrupt (its content checksum does not match)")
    return blocks
