"""Writing git tree objects straight into the object database.

Trees are encoded by hand (mode, name bytes, raw oid; git's sort order) so a
snapshot can build thousands of them without a TreeBuilder round trip per
entry, and so names are raw bytes end to end. Knows nothing of images.
"""
from __future__ import annotations

import hashlib
from typing import Iterable

import pygit2

from .errors import DataError, WriteFailed
from .store.packfile import BLOB, TREE, PackWriter

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000

Entry = tuple[bytes, int, bytes]  # (name, mode, 20-byte oid)


def _sort_key(entry: Entry) -> bytes:
    name, mode, _ = entry
    return name + b"/" if mode == MODE_TREE else name


def encode_tree(entries: Iterable[Entry]) -> bytes:
    return b"".join(b"%o %s\x00%s" % (mode, name, oid) for name, mode, oid in sorted(entries, key=_sort_key))


def tree_oid(data: bytes) -> bytes:
    return hashlib.sha1(b"tree %d\x00" % len(data) + data).digest()


def _odb_write(odb, kind, data: bytes) -> pygit2.Oid:
    try:
        return odb.write(kind, data)
    except (OSError, pygit2.GitError) as e:
        raise WriteFailed(f"cannot write to the git object database: {e}") from None


class TreeWriter:
    """Writes trees and blobs into a repository, skipping ones the odb already holds.

    With ``packed=True`` new objects are queued and written as one pack by
    ``flush()`` (which the owner must call before anything reads them back)."""

    def __init__(self, repo: pygit2.Repository, packed: bool = False):
        self.odb = repo.odb
        self.pack = PackWriter(repo) if packed else None

    def write(self, entries: Iterable[Entry]) -> bytes:
        data = encode_tree(entries)
        if self.pack is not None:
            return self.pack.add(TREE, data)
        raw = tree_oid(data)
        if pygit2.Oid(raw=raw) not in self.odb:
            _odb_write(self.odb, pygit2.enums.ObjectType.TREE, data)
        return raw

    def write_blob(self, data: bytes) -> bytes:
        if self.pack is not None:
            return self.pack.add(BLOB, data)
        return _odb_write(self.odb, pygit2.enums.ObjectType.BLOB, data).raw

    def flush(self) -> None:
        if self.pack is not None:
            self.pack.flush()


def decode_tree(data: bytes) -> list[Entry]:
    """Parse a raw tree object into ``(name, mode, raw oid)`` entries, in stored order.
    Bytes that are no tree (a name holding NUL shifts every field after it) are a ValueError."""
    out: list[Entry] = []
    i, n = 0, len(data)
    while i < n:
        sp = data.find(b" ", i)
        nul = data.find(b"\x00", sp)
        mode, oid = data[i:sp], data[nul + 1 : nul + 21]
        if sp < 0 or nul < 0 or not mode.isdigit() or len(oid) != 20:
            raise ValueError(f"malformed tree entry at byte {i}")
        out.append((data[sp + 1 : nul], int(mode, 8), oid))
        i = nul + 21
    return out


def read_tree(repo: pygit2.Repository, raw_oid: bytes) -> list[Entry]:
    """The entries of tree ``raw_oid``; an object that is not a well-formed tree is a DataError."""
    kind, data = repo.odb.read(pygit2.Oid(raw=raw_oid))
    try:
        if kind != pygit2.enums.ObjectType.TREE:
            raise ValueError("not a tree object")
        return decode_tree(data)
    except ValueError as e:
        raise DataError(f"tree {raw_oid.hex()}: {e}") from None


def read_blob(repo: pygit2.Repository, raw_oid: bytes) -> bytes:
    return repo.odb.read(pygit2.Oid(raw=raw_oid))[1]


Change = tuple[int, bytes] | None  # (mode, raw oid) to put at a path, or None to remove it


def edit(writer: "TreeWriter", repo: pygit2.Repository, base: bytes | None, changes: dict[bytes, Change]) -> bytes:
    """A new tree: ``base`` (raw oid, or None for empty) with ``changes`` applied.

    Keys are ``/``-separated paths; intermediate trees are created as needed and
    trees left empty are dropped. Untouched subtrees keep their ids."""
    entries = {name: (mode, oid) for name, mode, oid in (read_tree(repo, base) if base else [])}
    grouped: dict[bytes, dict[bytes, Change]] = {}
    for path, change in changes.items():
        head, sep, rest = path.partition(b"/")
        if sep:
            grouped.setdefault(head, {})[rest] = change
        elif change is None:
            entries.pop(head, None)
        else:
            entries[head] = change
    for head, sub in grouped.items():
        current = entries.get(head)
        sub_base = current[1] if current and current[0] == MODE_TREE else None
        new = edit(writer, repo, sub_base, sub)
        if new == tree_oid(b""):
            entries.pop(head, None)
        else:
            entries[head] = (MODE_TREE, new)
    return writer.write((name, mode, oid) for name, (mode, oid) in entries.items())


def lookup(repo: pygit2.Repository, tree: bytes, path: bytes) -> tuple[int, bytes] | None:
    """The ``(mode, raw oid)`` at ``path`` inside ``tree``, or None."""
    mode, oid = MODE_TREE, tree
    for part in path.split(b"/"):
        if mode != MODE_TREE:
            return None
        found = next(((m, o) for n, m, o in read_tree(repo, oid) if n == part), None)
        if found is None:
            return None
        mode, oid = found
    return mode, oid


def diff_trees(repo: pygit2.Repository, a: bytes | None, b: bytes | None, prefix: bytes = b""):
    """Yield ``(path, old, new)`` for every non-tree path that differs, where old/new are
    ``(mode, raw oid)`` or None; equal subtrees are skipped by id."""
    if a == b:
        return
    ea = {n: (m, o) for n, m, o in (read_tree(repo, a) if a else [])}
    eb = {n: (m, o) for n, m, o in (read_tree(repo, b) if b else [])}
    for name in sorted(ea.keys() | eb.keys()):
        old, new = ea.get(name), eb.get(name)
        if old == new:
            continue
        path = prefix + name
        old_tree = old[1] if old and old[0] == MODE_TREE else None
        new_tree = new[1] if new and new[0] == MODE_TREE else None
        if old_tree or new_tree:
            yield from diff_trees(repo, old_tree, new_tree, path + b"/")
        if (old and not old_tree) or (new and not new_tree):
            yield path, (old if old and not old_tree else None), (new if new and not new_tree else None)
