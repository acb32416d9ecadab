"""Which directories of a sandbox changed since the last look: Linux inotify, through ctypes.

A recording process captures the sandbox at every step; with a watch on
each directory it lists only the directories something happened in (and
their ancestors), as git's fsmonitor lets ``git status`` do. Any doubt gives
``None`` from ``changed()``, meaning "walk everything": no inotify on this
system, the watch limit reached, the kernel's event queue overflowed.
Writes through a shared ``mmap`` make no event; a recorded agent writes
files with ``write``. Reads the filesystem; writes nothing.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF = 0x400, 0x800
IN_Q_OVERFLOW, IN_IGNORED, IN_ISDIR = 0x4000, 0x8000, 0x40000000
IN_ONLYDIR, IN_DONT_FOLLOW, IN_EXCL_UNLINK = 0x01000000, 0x02000000, 0x04000000
MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
        | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of name


def _libc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        libc.inotify_init1, libc.inotify_add_watch  # noqa: B018  (absent on other systems)
        return libc
    except (OSError, AttributeError):
        return None


class DirWatch:
    """Watches every directory under ``root`` (absolute bytes) but the ``exclude``d paths."""

    def __init__(self, root: bytes, exclude: set[bytes] = frozenset()):
        self.root, self.exclude = root.rstrip(b"/") or b"/", set(exclude)
        self.rel: dict[int, bytes] = {}  # watch descriptor -> directory, relative to root
        self.dirty: set[bytes] = set()
        self.lost = False  # events were lost: the next look walks everything
        self.broken = False  # a directory could not be watched: every look walks everything
        self._libc = _libc()
        self.fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if self._libc else -1
        if self.fd >= 0:
            self._add_tree(b"")

    def _abs(self, rel: bytes) -> bytes:
        return self.root + b"/" + rel if rel else self.root

    def _add_tree(self, rel: bytes, new: bool = False) -> None:
        """Watch ``rel`` and every directory below it (not following symlinks); ``new``: they
        appeared since the last look (moved in, perhaps), so each is changed."""
        stack = [rel]
        while stack and not self.broken:
            rel = stack.pop()
            path = self._abs(rel)
            if path in self.exclude:
                continue
            if new:
                self.dirty.add(rel)
            wd = self._libc.inotify_add_watch(self.fd, path, MASK)
            if wd < 0:
                if ctypes.get_errno() not in (errno.ENOENT, errno.ENOTDIR):  # gone meanwhile: its parent saw it
                    self.broken = True  # the watch limit, or no permission: walk from now on
                    self.close()
                continue
            self.rel[wd] = rel
            try:
                with os.scandir(path) as it:
                    stack += [rel + b"/" + e.name if rel else e.name for e in it if e.is_dir(follow_symlinks=False)]
            except OSError:
                self.dirty.add(rel)

    def changed(self) -> set[bytes] | None:
        """The directories (relative; ``b""`` the root) whose entries changed since the last
        call, or None when that is not known and everything must be walked."""
        while self.fd >= 0:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            self._parse(data)  # may find a new directory it cannot watch: broken
        dirty, lost = self.dirty, self.lost
        self.dirty, self.lost = set(), False
        return None if lost or self.broken or self.fd < 0 else dirty

    def _parse(self, data: bytes) -> None:
        pos = 0
        while pos + _EVENT.size <= len(data):
            wd, mask, _, size = _EVENT.unpack_from(data, pos)
            name = data[pos + _EVENT.size: pos + _EVENT.size + size].rstrip(b"\0")
            pos += _EVENT.size + size
            if mask & IN_Q_OVERFLOW:
                self.lost = True
                continue
            rel = self.rel.get(wd)
            if rel is None:
                continue
            if mask & IN_IGNORED:  # the directory is gone; its parent saw it go
                del self.rel[wd]
                continue
            self.dirty.add(rel)
            if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO) and name:
                self._add_tree(rel + b"/" + name if rel else name, new=True)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def unchanged_test(dirty: set[bytes]):
    """``(rel_dir) -> bool``: True when nothing changed in ``rel_dir`` or below it."""
    touched = set()
    for rel in dirty:
        touched.add(rel)
        while rel:
            rel = rel.rpartition(b"/")[0]
            touched.add(rel)
    return lambda rel: rel not in touched
