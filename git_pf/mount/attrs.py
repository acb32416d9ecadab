"""The attributes a git-pf mount answers, with their cache hints.

Encodes a node's ``fuse_attr`` fields: an upper-layer file's from its
``stat``, a lower-layer entry's from the image (mode, size from the object
header, the image's time, the mounting user as owner), with long
entry/attribute timeouts for the lower layer, which never changes under a
mount, and a short one for the upper layer. A mixin of ``ops.Operations``:
it reads the operations' view, uid, gid and image times; it changes nothing.
"""
from __future__ import annotations

import stat

from . import protocol as P
from .view import Node

LOWER_TIMEOUT = P.valid(86400.0)  # the lower layer never changes under a mount
UPPER_ATTR_TIMEOUT = P.valid(1.0)  # all changes pass through the kernel, which invalidates on write
LOWER_BLKSIZE = 128 * 1024


def ns(t_ns: int) -> tuple[int, int]:
    return divmod(t_ns, 1_000_000_000)


class Attributes:
    """``fuse_attr`` fields and entries of ``Operations`` (see the module docstring)."""

    def _attrs(self, ino: int, node: Node) -> tuple[tuple[int, int], tuple]:
        """(attribute timeout, fuse_attr fields) of ``node``."""
        st = node.upper
        if st is None:
            return self._lower_attrs(ino, node.lower)
        nlink = 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink
        (a, an), (m, mn), (c, cn) = ns(st.st_atime_ns), ns(st.st_mtime_ns), ns(st.st_ctime_ns)
        return UPPER_ATTR_TIMEOUT, (ino, st.st_size, st.st_blocks, a, m, c, an, mn, cn, st.st_mode, nlink,
                                    st.st_uid, st.st_gid, st.st_rdev, 4096, 0)

    def _lower_attrs(self, ino: int, e) -> tuple[tuple[int, int], tuple]:
        size = len(self.view.lower.readlink(e)) if stat.S_ISLNK(e.mode) else self.view.lower.size(e)
        return LOWER_TIMEOUT, (ino, size, (size + 511) // 512, *self._lower_times, e.mode, 1, self.uid, self.gid,
                               0, LOWER_BLKSIZE, 0)

    def _entry_of(self, ino: int, node: Node) -> bytes:
        return P.entry_out(LOWER_TIMEOUT, *self._attrs(ino, node))
