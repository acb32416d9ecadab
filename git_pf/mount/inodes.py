"""The tables a mount's request handlers keep: inodes, file handles, and a few values kept by inode.

Maps FUSE inodes to relative paths (stable for the life of the mount, moved
on rename), holds what an open file handle reads or writes through, and
keeps the most recently used readers and listings of a read-only mount.
Knows nothing of requests, git or the view; touches no file.
"""
from __future__ import annotations

import errno
import os
from collections import OrderedDict

from . import protocol as P

KEPT = 64  # readers and listings a read-only mount keeps by inode (it has no handles)


def no(code: int) -> OSError:
    """The error a handler raises for ``code``; the session answers it."""
    return OSError(code, os.strerror(code))


class Inodes:
    """inode <-> relative path; an unlinked inode keeps its number but loses its path."""

    def __init__(self):
        self.path: dict[int, bytes | None] = {P.ROOT_ID: b""}
        self.ino: dict[bytes, int] = {b"": P.ROOT_ID}
        self.next = P.ROOT_ID + 1

    def of(self, rel: bytes) -> int:
        ino = self.ino.get(rel)
        if ino is None:
            ino = self.ino[rel] = self.next
            self.path[ino] = rel
            self.next += 1
        return ino

    def rel(self, ino: int) -> bytes:
        rel = self.path.get(ino)
        if rel is None:
            raise OSError(errno.ENOENT, "stale inode")
        return rel

    def detach(self, rel: bytes) -> None:
        ino = self.ino.pop(rel, None)
        if ino is not None:
            self.path[ino] = None

    def move(self, old: bytes, new: bytes) -> None:
        self.detach(new)
        prefix = new + b"/"
        for key in [k for k in self.ino if k.startswith(prefix)]:
            self.detach(key)
        prefix = old + b"/"
        for key in [k for k in self.ino if k == old or k.startswith(prefix)]:
            ino = self.ino.pop(key)
            moved = new + key[len(old):]
            self.ino[moved] = ino
            self.path[ino] = moved


class Handle:
    def __init__(self, ino: int, fd: int | None = None, reader=None):
        self.ino, self.fd, self.reader = ino, fd, reader


class Kept(OrderedDict):
    """A few values by key, least recently used dropped first."""

    def get_used(self, key):
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key, value):
        self[key] = value
        if len(self) > KEPT:
            self.popitem(last=False)
        return value
