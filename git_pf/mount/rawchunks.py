"""Chunks stored raw: served from the side store's file in place, checked, never decoded.

Content that does not compress (media, archives, weights, random data) is stored
by zstd in raw blocks: each block's bytes as they are, after a 3-byte header. For
such a frame the mount needs no decoder: ``mapped`` takes the chunk's checked raw
blocks as views of the store's mapped file (``git_pf.store.rawframes``), and a read
is answered with views of the file's pages (``Spans``). The kernel then copies
each byte once, from the store's page cache into the mounted file's; decoding
copied it twice more (reading the frame, then decoding it) into memory of the
daemon's own. Any other frame, an object not in the store's directory, and every
object when ``pf.rehashReads`` asks for sha256 are left to the decoder
(``SideStore.get``). Knows nothing of FUSE.
"""
from __future__ import annotations

import bisect

from git_pf.store import rawframes
from git_pf.store.large import Chunk
from git_pf.store.sidestore import SideStore


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


def mapped(store: SideStore, chunk: Chunk) -> Spans | None:
    """``chunk`` as views of its raw blocks in the store's file, checked against the frame's
    checksum; None when the decoder must serve it (see the module). CorruptObject when the
    blocks' bytes do not match the checksum, or the size is refused (``pf.maxFrameSize``)."""
    blocks = rawframes.mapped(store, chunk.oid, chunk.size)
    return None if blocks is None else Spans(blocks)
