"""The stat cache: git's index trick for snapshots.

For each sandbox path it remembers the lstat fields that change when content
or attributes change (mtime, ctime, size, inode, mode) together with the blob
id and xattrs recorded last time, so a re-snapshot reads only files whose
stat changed. Entries modified too close to the snapshot's start are not
cached ("racy" entries, as in git). One cache file per sandbox root under
``$GIT_DIR/pf/statcache/``; a damaged or stale cache is simply ignored.
Local and private: never part of an image, never transported.
"""
from __future__ import annotations

import contextlib
import gc
import hashlib
import marshal
import os
import tempfile
from pathlib import Path

FORMAT = 1
RACY_NS = 100_000_000  # entries whose ctime falls within 100 ms of the start are re-read next time

StatKey = tuple[int, int, int, int, int]  # mtime_ns, ctime_ns, size, ino, mode
# value: (stat key, blob raw oid or None for dirs, sorted xattr items, is_pointer)
Entry = tuple[StatKey, bytes | None, tuple[tuple[str, bytes], ...], bool]


@contextlib.contextmanager
def _no_gc():
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def stat_key(st: os.stat_result) -> StatKey:
    return (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, st.st_mode)


class StatCache:
    def __init__(self, path: Path, settings: tuple, entries: dict[bytes, Entry] | None = None):
        self.path = path
        self.settings = settings
        self.old: dict[bytes, Entry] = entries or {}
        self.new: dict[bytes, Entry] = {}

    @classmethod
    def load(cls, git_dir: Path, root: bytes, settings: tuple, tree_exists) -> "StatCache":
        """The cache for ``root``; empty when absent, damaged, made with other settings,
        or when the tree it produced is gone from the object database."""
        name = hashlib.sha256(root).hexdigest()[:24]
        path = Path(git_dir) / "pf" / "statcache" / name
        try:
            with _no_gc():  # tens of thousands of small tuples: cyclic GC passes would triple the cost
                fmt, saved_root, saved_settings, tree_hex, entries = marshal.loads(path.read_bytes())
            if fmt == FORMAT and saved_root == root and saved_settings == settings and tree_exists(tree_hex):
                return cls(path, settings, entries)
        except (OSError, ValueError, EOFError, TypeError):
            pass
        return cls(path, settings)

    def lookup(self, rel: bytes, key: StatKey) -> Entry | None:
        hit = self.old.get(rel)
        if hit is not None and hit[0] == key:
            return hit
        return None

    def record(self, rel: bytes, entry: Entry, start_ns: int) -> None:
        key = entry[0]
        if key[1] >= start_ns - RACY_NS:  # ctime: every change moves it, and no one can set it back
            return
        self.new[rel] = entry

    def save(self, root: bytes, tree_hex: str) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        data = marshal.dumps((FORMAT, root, self.settings, tree_hex, self.new))
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
