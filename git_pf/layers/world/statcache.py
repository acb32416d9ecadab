"""The stat cache: git's index trick for snapshots, kept as one record per directory.

A directory's record holds the lstat fields of its entries that change when
content or attributes change (mtime, ctime, size, inode, mode) packed into one
byte string, their names, the blob or subtree id each produced, the xattrs and
pointer flags, the tree the directory became and the ``fs.attrs`` entries it
gave; only entries that ignore rules keep are recorded, plus a memo of which
listed entries the rules dropped. A re-snapshot compares
a directory's fresh listing with its record in one step and reuses the tree
when nothing in or below it changed; otherwise it looks entries up one by one
and reads only those whose fields changed.
Entries changed too close to the snapshot's start ("racy", as in git) are
stored with an impossible ctime, so they are read again next time. One cache
file per sandbox root under ``$GIT_DIR/pf/statcache/``; a damaged or stale
cache is simply ignored. Local and private: never part of an image, never
transported. Knows nothing of walking or of git objects.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import marshal
import os
import tempfile
from array import array
from pathlib import Path
from typing import NamedTuple

FORMAT = 3
RACY_NS = 100_000_000  # entries whose ctime falls within 100 ms of the start are re-read next time
KEY_FIELDS = 5  # per entry: mtime_ns, ctime_ns, size, ino, mode
CTIME = 1  # index of ctime within an entry's fields
NOT_CACHED = -1  # a ctime no file has: the entry never matches
NO_OID = bytes(20)  # the "oid" of a subdirectory that produced no tree, or of a skipped entry
OID_LEN = 20


@contextlib.contextmanager
def no_gc():
    """Cyclic GC off: walks and loads make many small acyclic objects, and GC passes over
    them would cost more than the work itself."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class DirRecord(NamedTuple):
    key: tuple | None  # the directory's own fields (None: root, or racy)
    xattrs: tuple  # its own user.* xattrs, sorted (name, value) pairs
    names: bytes  # kept entries in listing order, joined by "/"
    keys: bytes  # their fields, KEY_FIELDS int64 (native order) each
    oids: bytes  # per entry, OID_LEN bytes: blob, link blob or subtree id
    extras: dict  # name -> (sorted xattr items, is_pointer) for files with either
    tree: bytes | None  # the tree the directory produced; None when empty
    attrs: tuple  # fs.attrs entries it gave: (path, is_dir, mode, xattr items, pointer)
    counts: tuple  # (files, bytes, pointers) of its direct entries
    ignore_memo: tuple | None  # which listed entries ignore rules dropped, and under which rules


def pack_keys(keys: list[int]) -> bytes:
    return array("q", keys).tobytes()


class OldEntries:
    """Per-entry lookups in an old record, for a directory whose listing changed."""

    def __init__(self, rec: DirRecord | None):
        self.rec = rec
        names = rec.names.split(b"/") if rec is not None and rec.names else []
        self.index = {name: i for i, name in enumerate(names)}
        self.keys = array("q", rec.keys).tolist() if rec is not None else []

    def get(self, name: bytes, key: list[int]) -> tuple[bytes, tuple, bool] | None:
        """(oid, xattr items, is_pointer) when ``name`` had exactly these fields."""
        i = self.index.get(name)
        if i is None or self.keys[i * KEY_FIELDS : (i + 1) * KEY_FIELDS] != key:
            return None
        xattrs, is_pointer = self.rec.extras.get(name, ((), False))
        return self.rec.oids[i * OID_LEN : (i + 1) * OID_LEN], xattrs, is_pointer


class StatCache:
    def __init__(self, path: Path, settings: tuple, dirs: dict[bytes, DirRecord] | None = None):
        self.path = path
        self.settings = settings
        self.old: dict[bytes, DirRecord] = dirs or {}  # by directory path ("" for the root), as loaded
        self.new: dict[bytes, DirRecord] = {}  # what this snapshot saw, saved by save()

    @staticmethod
    def path_for(git_dir: Path, root: bytes) -> Path:
        return Path(git_dir) / "pf" / "statcache" / hashlib.sha256(root).hexdigest()[:24]

    @staticmethod
    def forget(git_dir: Path, root: bytes) -> None:
        """Drop the cache file of ``root`` (a temporary sandbox that is being removed)."""
        StatCache.path_for(git_dir, root).unlink(missing_ok=True)

    @classmethod
    def load(cls, git_dir: Path, root: bytes, settings: tuple, tree_exists) -> "StatCache":
        """The cache for ``root``; empty when absent, damaged, made with other settings or
        by another format, or when the tree it produced is gone from the object database."""
        path = cls.path_for(git_dir, root)
        try:
            with no_gc():
                fmt, saved_root, saved_settings, tree_hex, dirs = marshal.loads(path.read_bytes())
                if fmt == FORMAT and saved_root == root and saved_settings == settings and tree_exists(tree_hex):
                    return cls(path, settings, {rel: DirRecord._make(rec) for rel, rec in dirs.items()})
        except (OSError, ValueError, EOFError, TypeError):
            pass
        return cls(path, settings)

    def save(self, root: bytes, tree_hex: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        dirs = {rel: tuple(rec) for rel, rec in self.new.items()}
        data = marshal.dumps((FORMAT, root, self.settings, tree_hex, dirs))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
