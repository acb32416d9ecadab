"""Capture a sandbox directory as ``world/fs`` (a git tree) plus ``fs.attrs`` entries.

Walks the directory without following symlinks, honours ignore rules, reuses
blob ids from the stat cache for unchanged files, and sends files at or over
the large-file threshold to the side store, leaving a pointer blob in the
tree. Hard links become copies; fifos, sockets and devices are skipped with
a warning. Writes only git objects and side-store objects, never refs.
"""
from __future__ import annotations

import errno
import mmap
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ..errors import UsageError
from ..gittree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, Entry, TreeWriter
from ..pointer import Pointer
from ..sidestore import SideStore
from .attrs import DEFAULT_DIR_MODE, DEFAULT_EXEC_MODE, DEFAULT_FILE_MODE, PathAttrs
from .ignore import ALWAYS_IGNORED_TOP, IgnoreRules
from .names import to_tree
from .statcache import StatCache, stat_key
from .xattrs import read_user_xattrs


@dataclass
class CaptureStats:
    files: int = 0
    bytes: int = 0
    pointers: int = 0
    files_read: int = 0
    skipped: list[str] = field(default_factory=list)  # warnings, one line each


@dataclass
class Capture:
    tree: str  # hex id of the world/fs tree
    attrs: list[PathAttrs]
    stats: CaptureStats


def _display(rel: bytes) -> str:
    return os.fsdecode(rel)


class _Walker:
    def __init__(self, repo: pygit2.Repository, store: SideStore, threshold: int, cache: StatCache,
                 exclude: set[bytes], packed: bool = False):
        self.writer = TreeWriter(repo, packed)
        self.store = store
        self.threshold = threshold
        self.cache = cache
        self.exclude = exclude
        self.attrs: list[PathAttrs] = []
        self.stats = CaptureStats()
        self.start_ns = time.time_ns()

    def walk(self, abs_dir: bytes, rel_dir: bytes, rules: IgnoreRules) -> bytes | None:
        """Write the tree of one directory; None when nothing in it is kept."""
        entries: list[Entry] = []
        try:
            listing = list(os.scandir(abs_dir))
        except PermissionError:
            raise UsageError(f"cannot read directory '{_display(rel_dir) or '.'}': permission denied") from None
        plain_rules = rules.empty
        for de in listing:
            name = de.name
            if not rel_dir and name in ALWAYS_IGNORED_TOP:
                continue
            if de.path in self.exclude:
                continue
            rel = rel_dir + b"/" + name if rel_dir else name
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue  # vanished while we walked
            entry = self._cached_plain(rel, name, st) if plain_rules else None
            if entry is None:
                entry = self._entry(de.path, rel, name, st, rules)
            if entry is not None:
                entries.append(entry)
        if not entries:
            return None
        return self.writer.write(entries)

    def _cached_plain(self, rel: bytes, name: bytes, st: os.stat_result) -> Entry | None:
        """The entry of a regular file the stat cache saw unchanged and that has nothing
        for fs.attrs (default mode, no xattrs): the common case of a re-snapshot, kept
        to one dict lookup. None means "take the general path"."""
        hit = self.cache.old.get(rel)
        if hit is None or hit[2] or hit[3] or hit[0] != stat_key(st):
            return None
        perm = st.st_mode & 0o7777
        mode = MODE_FILE if perm == DEFAULT_FILE_MODE else MODE_EXEC if perm == DEFAULT_EXEC_MODE else None
        if mode is None or not stat.S_ISREG(st.st_mode):
            return None
        self.cache.record(rel, hit, self.start_ns)
        self.stats.files += 1
        self.stats.bytes += st.st_size
        return (to_tree(name), mode, hit[1])

    def _entry(self, path: bytes, rel: bytes, name: bytes, st: os.stat_result, rules: IgnoreRules) -> Entry | None:
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            if rules.ignored(rel, True):
                return None
            sub = self.walk(path, rel, rules.descend(path, rel))
            self._dir_attrs(path, rel, st, empty=sub is None)
            return None if sub is None else (to_tree(name), MODE_TREE, sub)
        if rules.ignored(rel, False):
            return None
        return self.leaf(path, rel, name, st)

    def leaf(self, path: bytes, rel: bytes, name: bytes, st: os.stat_result) -> Entry | None:
        """The tree entry of one non-directory (recording its attrs); None when skipped."""
        mode = st.st_mode
        if stat.S_ISREG(mode):
            return self._file(path, rel, name, st)
        if stat.S_ISLNK(mode):
            self.stats.files += 1
            return (to_tree(name), MODE_LINK, self.writer.write_blob(os.readlink(path)))
        self.stats.skipped.append(f"skipped '{_display(rel)}': {_kind(mode)} files are not captured")
        return None

    def _file(self, path: bytes, rel: bytes, name: bytes, st: os.stat_result) -> Entry:
        key = stat_key(st)
        hit = self.cache.lookup(rel, key)
        if hit is None:
            blob, is_pointer = self._read_file(path, rel, st.st_size)
            hit = (key, blob, tuple(sorted(self._xattrs(path, rel).items())), is_pointer)
        self.cache.record(rel, hit, self.start_ns)
        _, blob, xattr_items, is_pointer = hit
        perm = st.st_mode & 0o7777
        executable = perm & 0o100
        if xattr_items or is_pointer or perm != (DEFAULT_EXEC_MODE if executable else DEFAULT_FILE_MODE):
            default = DEFAULT_EXEC_MODE if executable else DEFAULT_FILE_MODE
            self.attrs.append(PathAttrs(rel, mode=None if perm == default else perm, xattrs=dict(xattr_items),
                                        pointer=is_pointer))
        self.stats.files += 1
        self.stats.bytes += st.st_size
        self.stats.pointers += is_pointer
        return (to_tree(name), MODE_EXEC if executable else MODE_FILE, blob)

    def _read_file(self, path: bytes, rel: bytes, size: int) -> tuple[bytes, bool]:
        self.stats.files_read += 1
        try:
            with open(path, "rb") as f:
                if size < self.threshold or size == 0:
                    return self.writer.write_blob(f.read()), False
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    large = self.store.put_large(mm)
        except PermissionError:
            raise UsageError(f"cannot read '{_display(rel)}': permission denied") from None
        except OSError as e:
            raise UsageError(f"cannot read '{_display(rel)}': {e.strerror or e}") from None
        return self.writer.write_blob(Pointer.of(large).encode()), True

    def _xattrs(self, path: bytes, rel: bytes) -> dict[str, bytes]:
        try:
            return read_user_xattrs(path)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return {}
            raise UsageError(f"cannot read attributes of '{_display(rel)}': {e.strerror}") from None

    def _dir_attrs(self, path: bytes, rel: bytes, st: os.stat_result, empty: bool) -> None:
        key = stat_key(st)
        hit = self.cache.lookup(rel, key)
        xattrs = dict(hit[2]) if hit is not None else self._xattrs(path, rel)
        self.cache.record(rel, (key, None, tuple(sorted(xattrs.items())), False), self.start_ns)
        perm = stat.S_IMODE(st.st_mode)
        special = perm != DEFAULT_DIR_MODE
        if empty or special or xattrs:
            self.attrs.append(PathAttrs(rel, is_dir=True, mode=perm if special else None, xattrs=xattrs))


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special"


def entry_reader(repo: pygit2.Repository, store: SideStore, threshold: int) -> _Walker:
    """A capturer for individual files (``.leaf``), without ignore rules or stat cache;
    ``.attrs`` and ``.stats`` accumulate what it read."""
    return _Walker(repo, store, threshold, StatCache(Path(os.devnull), ()), set())


def capture(repo: pygit2.Repository, store: SideStore, root: bytes, *, threshold: int,
            ignore: list[str], cache: StatCache, exclude: set[bytes]) -> Capture:
    """Capture the directory ``root`` (absolute, already resolved)."""
    walker = _Walker(repo, store, threshold, cache, exclude, packed=True)  # one pack, not a file per object
    tree = walker.walk(root, b"", IgnoreRules.for_root(root, ignore))
    if tree is None:
        tree = walker.writer.write([])
    walker.writer.flush()
    tree_hex = tree.hex()
    return Capture(tree_hex, walker.attrs, walker.stats)
