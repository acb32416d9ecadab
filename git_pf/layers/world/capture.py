"""Capture a sandbox directory as ``world/fs`` (a git tree) plus ``fs.attrs`` entries.

Walks the directory without following symlinks and honours ignore rules. With
the stat cache, a directory whose kept entries (names and lstat fields, after
ignore rules) and subtrees are unchanged gives back its recorded tree and
attrs without per-file work; in any other directory only entries whose fields
changed are read. Files at or over the large-file threshold go to the side
store, leaving a pointer blob in the tree. Hard links become copies; fifos,
sockets and devices are skipped with a warning. Every tree it writes holds
only names it listed from the directory and escaped, in git's order: sound by
construction, so the world it returns is marked sound (``safepath.mark_sound``)
and no merge reads it to check it. Writes only git objects, side-store objects
and that mark, never refs.
"""
from __future__ import annotations

import errno
import mmap
import os
import stat
import time
from dataclasses import dataclass, field

import pygit2

from ...core.errors import UsageError
from ...image import safepath
from ...image.tree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, Entry, TreeWriter
from ...store.pointer import Pointer
from ...store.sidestore import SideStore
from .attrs import DEFAULT_DIR_MODE, DEFAULT_EXEC_MODE, DEFAULT_FILE_MODE, PathAttrs
from .ignore import ALWAYS_IGNORED_TOP, IgnoreRules
from .names import to_tree
from .statcache import (CTIME, KEY_FIELDS, NO_OID, NOT_CACHED, OID_LEN, RACY_NS, DirRecord, OldEntries, StatCache,
                        no_gc, pack_keys)
from .xattrs import read_user_xattrs


@dataclass
class CaptureStats:
    files: int = 0
    bytes: int = 0
    pointers: int = 0
    files_read: int = 0
    skipped: list[str] = field(default_factory=list)  # warnings, one line each
    dirs_listed: int = 0  # directories listed (the others' records came from the stat cache)


@dataclass
class Capture:
    tree: str  # hex id of the world/fs tree
    attrs: list[PathAttrs]
    stats: CaptureStats


def _display(rel: bytes) -> str:
    return os.fsdecode(rel)


def _join(rel_dir: bytes, name: bytes) -> bytes:
    return rel_dir + b"/" + name if rel_dir else name


class _Reader:
    """Reads single non-directories into blobs (no cache, no ignore rules); ``.attrs`` and
    ``.stats`` accumulate what it captured."""

    def __init__(self, repo: pygit2.Repository, store: SideStore, threshold: int, packed: bool = False):
        self.writer = TreeWriter(repo, packed)
        self.store = store
        self.threshold = threshold
        self.attrs: list[PathAttrs] = []
        self.stats = CaptureStats()

    def leaf(self, path: bytes, rel: bytes, name: bytes, st: os.stat_result) -> Entry | None:
        """The tree entry of one non-directory (recording its attrs); None when skipped."""
        got = self.read(path, rel, st.st_mode, st.st_size)
        return None if got is None else self.account(rel, name, st.st_mode, st.st_size, *got)

    def read(self, path: bytes, rel: bytes, mode: int, size: int) -> tuple[bytes, tuple, bool] | None:
        """(blob id, sorted xattr items, is_pointer) of a file or symlink; None, with a
        warning, for anything else."""
        if stat.S_ISREG(mode):
            blob, is_pointer = self._read_file(path, rel, size)
            return blob, self.xattr_items(path, rel), is_pointer
        if stat.S_ISLNK(mode):
            return self.writer.write_blob(os.readlink(path)), (), False
        self.stats.skipped.append(f"skipped '{_display(rel)}': {_kind(mode)} files are not captured")
        return None

    def account(self, rel: bytes, name: bytes, mode: int, size: int, blob: bytes, xattr_items: tuple,
                is_pointer: bool) -> Entry:
        """Count one captured file or symlink and note its fs.attrs entry; its tree entry."""
        self.stats.files += 1
        if stat.S_ISLNK(mode):
            return (to_tree(name), MODE_LINK, blob)
        perm = mode & 0o7777
        executable = perm & 0o100
        default = DEFAULT_EXEC_MODE if executable else DEFAULT_FILE_MODE
        if xattr_items or is_pointer or perm != default:
            self.attrs.append(PathAttrs(rel, mode=None if perm == default else perm, xattrs=dict(xattr_items),
                                        pointer=is_pointer))
        self.stats.bytes += size
        self.stats.pointers += is_pointer
        return (to_tree(name), MODE_EXEC if executable else MODE_FILE, blob)

    def _read_file(self, path: bytes, rel: bytes, size: int) -> tuple[bytes, bool]:
        self.stats.files_read += 1
        try:
            with open(path, "rb") as f:
                if size < self.threshold or size == 0:
                    return self.writer.write_blob(f.read()), False
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                    large = self.store.put_large(mm, f.fileno())
        except PermissionError:
            raise UsageError(f"cannot read '{_display(rel)}': permission denied") from None
        except OSError as e:
            raise UsageError(f"cannot read '{_display(rel)}': {e.strerror or e}") from None
        return self.writer.write_blob(Pointer.of(large).encode()), True

    def xattr_items(self, path: bytes, rel: bytes) -> tuple:
        return tuple(sorted(self._xattrs(path, rel).items()))

    def _xattrs(self, path: bytes, rel: bytes) -> dict[str, bytes]:
        try:
            return read_user_xattrs(path)
        except OSError as e:
            if e.errno == errno.ENOENT:
                return {}
            raise UsageError(f"cannot read attributes of '{_display(rel)}': {e.strerror}") from None


def _kind(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special"


@dataclass
class _Listing:
    """One directory's kept entries: names, their lstat fields (KEY_FIELDS ints each,
    flat) and the indices of the subdirectories."""

    names: list[bytes]
    keys: list[int]
    dirs: list[int]

    def key(self, i: int) -> list[int]:
        return self.keys[i * KEY_FIELDS : (i + 1) * KEY_FIELDS]

    def without(self, dropped: set[int]) -> "_Listing":
        """The listing less the entries at the indices in ``dropped``."""
        out = _Listing([], [], [])
        dirs = set(self.dirs)
        for i, name in enumerate(self.names):
            if i not in dropped:
                if i in dirs:
                    out.dirs.append(len(out.names))
                out.names.append(name)
                out.keys += self.key(i)
        return out


def _list(abs_dir: bytes, rel_dir: bytes) -> _Listing:
    """scandir plus one lstat per entry; entries that vanish meanwhile are left out."""
    names: list[bytes] = []
    keys: list[int] = []
    dirs: list[int] = []
    add_name = names.append
    try:
        it = os.scandir(abs_dir)
    except PermissionError:
        raise UsageError(f"cannot read directory '{_display(rel_dir) or '.'}': permission denied") from None
    with it:
        for de in it:  # the hot loop of an incremental snapshot: kept to the bare minimum
            try:
                st = de.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            mode = st.st_mode
            if mode & 0o170000 == 0o040000:  # S_ISDIR
                dirs.append(len(names))
            add_name(de.name)
            keys += (st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino, mode)
    return _Listing(names, keys, dirs)


def _unignored(listing: _Listing, rel_dir: bytes, rules: IgnoreRules, memo: tuple | None) -> tuple[_Listing, tuple]:
    """The listing without the entries ``rules`` ignore, and the memo of that decision:
    (rules token, names joined, directory indices, ignored indices). The previous memo
    answers without matching a pattern when the rules and the listed names and kinds
    are the same."""
    listed, dirs = b"/".join(listing.names), tuple(listing.dirs)
    if memo is not None and memo[0] == rules.token and memo[1] == listed and memo[2] == dirs:
        ignored = memo[3]
    else:
        is_dir = set(dirs)
        ignored = tuple(i for i, name in enumerate(listing.names) if rules.ignored(_join(rel_dir, name), i in is_dir))
        memo = (rules.token, listed, dirs, ignored)
    return (listing.without(set(ignored)) if ignored else listing), memo


class _Walker:
    def __init__(self, reader: _Reader, cache: StatCache, exclude: set[bytes], unchanged=None):
        self.reader = reader
        self.cache = cache
        self.unchanged = unchanged
        self.excluded: dict[bytes, set[bytes]] = {}  # directory -> names in it never captured
        for path in exclude:
            self.excluded.setdefault(os.path.dirname(path), set()).add(os.path.basename(path))
        self.racy_from = time.time_ns() - RACY_NS

    def walk(self, abs_dir: bytes, rel_dir: bytes, rules: IgnoreRules, own_key: tuple | None) -> bytes | None:
        """The tree of one directory (None when nothing in it is kept), recording its
        fs.attrs entries and its stat-cache record. ``own_key``: its lstat fields (None
        for the root, which has no fs.attrs entry of its own)."""
        if self.unchanged is not None and rel_dir in self.cache.old and self.unchanged(rel_dir):
            return self._reuse(rel_dir, self.cache.old[rel_dir])
        listing = _list(abs_dir, rel_dir)
        self.reader.stats.dirs_listed += 1
        if b".gitignore" in listing.names:
            rules = rules.descend(abs_dir, rel_dir)
        old = self.cache.old.get(rel_dir)
        never = self.excluded.get(abs_dir)
        if not rel_dir:
            never = ALWAYS_IGNORED_TOP | (never or set())
        if never and not never.isdisjoint(listing.names):
            listing = listing.without({i for i, name in enumerate(listing.names) if name in never})
        memo = None
        if not rules.empty:
            listing, memo = _unignored(listing, rel_dir, rules, old.ignore_memo if old is not None else None)
        base = abs_dir if abs_dir.endswith(b"/") else abs_dir + b"/"
        subtrees = {i: self.walk(base + listing.names[i], _join(rel_dir, listing.names[i]), rules,
                                 tuple(listing.key(i)))
                    for i in listing.dirs}
        if old is not None and self._unchanged(old, listing, subtrees, own_key):
            return self._reuse(rel_dir, old if old.ignore_memo == memo else old._replace(ignore_memo=memo))
        return self._build(base, rel_dir, listing, subtrees, own_key, old, memo)

    @staticmethod
    def _unchanged(old: DirRecord, listing: _Listing, subtrees: dict[int, bytes | None], own_key: tuple | None) -> bool:
        """True when the directory would produce exactly what ``old`` records: the same kept
        entries (after ignore rules) with the same fields, and the same subtrees."""
        if old.key != own_key or old.names != b"/".join(listing.names) or old.keys != pack_keys(listing.keys):
            return False
        oids = old.oids
        for i, tree in subtrees.items():
            if (tree or NO_OID) != oids[i * OID_LEN : (i + 1) * OID_LEN]:
                return False
        return True

    def _reuse(self, rel_dir: bytes, old: DirRecord) -> bytes | None:
        stats = self.reader.stats
        files, nbytes, pointers = old.counts
        stats.files += files
        stats.bytes += nbytes
        stats.pointers += pointers
        if old.attrs:
            self.reader.attrs += [PathAttrs(path, is_dir, mode, dict(xattrs), pointer)
                                  for path, is_dir, mode, xattrs, pointer in old.attrs]
        self.cache.new[rel_dir] = old
        return old.tree

    def _build(self, base: bytes, rel_dir: bytes, listing: _Listing, subtrees: dict[int, bytes | None],
               own_key: tuple | None, old: DirRecord | None, memo: tuple | None) -> bytes | None:
        """The general case: entries looked up one by one, changed ones read. ``base``: the
        directory's absolute path ending in "/"."""
        reader, cached = self.reader, OldEntries(old)
        first_attr = len(reader.attrs)
        before = (reader.stats.files, reader.stats.bytes, reader.stats.pointers)
        entries: list[Entry] = []
        oids: list[bytes] = []
        extras: dict[bytes, tuple] = {}
        for i, name in enumerate(listing.names):
            if i in subtrees:
                tree = subtrees[i]
                if tree is not None:
                    entries.append((to_tree(name), MODE_TREE, tree))
                oids.append(tree or NO_OID)
                continue
            key = listing.key(i)
            _, _, size, _, mode = key
            got = cached.get(name, key)
            if got is None:
                got = reader.read(base + name, _join(rel_dir, name), mode, size)
                if got is None:  # skipped: never cached, so the warning comes again next time
                    listing.keys[i * KEY_FIELDS + CTIME] = NOT_CACHED
                    oids.append(NO_OID)
                    continue
            blob, xattr_items, is_pointer = got
            entries.append(reader.account(_join(rel_dir, name), name, mode, size, blob, xattr_items, is_pointer))
            oids.append(blob)
            if xattr_items or is_pointer:
                extras[name] = (xattr_items, is_pointer)
        tree = reader.writer.write(entries) if entries else None
        own_xattrs = () if own_key is None else self._dir_attrs(base[:-1], rel_dir, own_key, old, empty=tree is None)
        counts = (reader.stats.files - before[0], reader.stats.bytes - before[1], reader.stats.pointers - before[2])
        attrs = tuple((a.path, a.is_dir, a.mode, tuple(sorted(a.xattrs.items())), a.pointer)
                      for a in reader.attrs[first_attr:])
        self.cache.new[rel_dir] = DirRecord(self._trusted(own_key), own_xattrs, b"/".join(listing.names),
                                            self._cacheable(listing.keys), b"".join(oids), extras, tree, attrs, counts,
                                            memo)
        return tree

    def _dir_attrs(self, abs_dir: bytes, rel_dir: bytes, own_key: tuple, old: DirRecord | None, empty: bool) -> tuple:
        """Note the directory's own fs.attrs entry if it needs one; its sorted xattr items."""
        if old is not None and old.key == own_key:
            xattr_items = old.xattrs
        else:
            xattr_items = self.reader.xattr_items(abs_dir, rel_dir)
        perm = stat.S_IMODE(own_key[4])
        special = perm != DEFAULT_DIR_MODE
        if empty or special or xattr_items:
            self.reader.attrs.append(PathAttrs(rel_dir, is_dir=True, mode=perm if special else None,
                                               xattrs=dict(xattr_items)))
        return xattr_items

    def _trusted(self, key: tuple | None) -> tuple | None:
        return None if key is None or key[CTIME] >= self.racy_from else key

    def _cacheable(self, keys: list[int]) -> bytes:
        """The packed fields, racy entries (ctime within RACY_NS of the start: they may still
        change within the same timestamp) marked so that they never match."""
        racy_from = self.racy_from
        for j in range(CTIME, len(keys), KEY_FIELDS):
            if keys[j] >= racy_from:
                keys[j] = NOT_CACHED
        return pack_keys(keys)


def entry_reader(repo: pygit2.Repository, store: SideStore, threshold: int) -> _Reader:
    """A capturer for individual files (``.leaf``), without ignore rules or stat cache;
    ``.attrs`` and ``.stats`` accumulate what it read."""
    return _Reader(repo, store, threshold)


def capture(repo: pygit2.Repository, store: SideStore, root: bytes, *, threshold: int,
            ignore: list[str], cache: StatCache, exclude: set[bytes], unchanged=None) -> Capture:
    """Capture the directory ``root`` (absolute, already resolved). ``unchanged(rel_dir)``: True
    for a directory a file watcher saw no change in or below since the cache was taken; its
    record is reused without listing it."""
    reader = _Reader(repo, store, threshold, packed=True)  # one pack, not a file per object
    walker = _Walker(reader, cache, exclude, unchanged)
    with no_gc():
        tree = walker.walk(root, b"", IgnoreRules.from_patterns(ignore), None)
    if tree is None:
        tree = reader.writer.write([])
    reader.writer.flush()
    old_root = cache.old.get(b"")
    if old_root is None or old_root.tree != tree:  # the same world as last time was marked then
        safepath.mark_sound(repo, tree)  # built here from listed names, escaped: sound by construction
    return Capture(tree.hex(), reader.attrs, reader.stats)
