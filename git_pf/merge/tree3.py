"""Three-way choices shared by the layer mergers: which side changed, key-wise
merges of mappings, and path-wise merges of image subtrees.

Pure decisions plus reading git trees; writes only the blobs a merged layer holds
(``blob``), never refs or files.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

import pygit2

from ..image.tree import MODE_FILE, MODE_TREE, diff_trees, lookup
from ..store.packfile import BLOB, object_id

MISSING: Any = object()  # a key absent on one side
AMBIGUOUS: Any = object()  # a key on which several merge bases disagree


def entry(git, image, path: bytes) -> tuple[int, bytes] | None:
    """``(mode, raw oid)`` at ``path`` of an image's tree, or None (also for ``image`` None)."""
    if image is None:
        return None
    return lookup(git, bytes.fromhex(image.tree), path)


def base_entry(git, bases: list, path: bytes):
    """The entry at ``path`` common to every merge base; AMBIGUOUS when they differ."""
    found = {entry(git, b, path) for b in bases} if bases else {None}
    return found.pop() if len(found) == 1 else AMBIGUOUS


def blob(git, data: bytes) -> tuple[int, bytes]:
    """Write ``data`` as a blob unless the repository holds it already (as ``TreeWriter`` writes a
    tree: libgit2's write makes a temporary file even for an object it holds); the tree entry."""
    raw = object_id(BLOB, data)
    if pygit2.Oid(raw=raw) not in git.odb:
        git.odb.write(pygit2.enums.ObjectType.BLOB, data)
    return MODE_FILE, raw


def pick(base, ours, theirs) -> str:
    """'unchanged' | 'same' (both changed alike) | 'ours' | 'theirs' | 'both' (changed differently)."""
    if ours == theirs:
        return "unchanged" if ours == base else "same"
    if theirs == base:
        return "ours"
    if ours == base:
        return "theirs"
    return "both"


def virtual_mapping(mappings: list[dict]) -> dict:
    """The base of a key-wise merge over several merge bases: a key keeps its value when
    every base agrees, else maps to AMBIGUOUS (so only equal sides merge cleanly)."""
    if not mappings:
        return {}
    if len(mappings) == 1:
        return dict(mappings[0])
    out = {}
    for key in set().union(*mappings):
        values = [m.get(key, MISSING) for m in mappings]
        out[key] = values[0] if all(v == values[0] for v in values) else AMBIGUOUS
    return out


def merge_mapping(base: dict, ours: dict, theirs: dict) -> tuple[dict, list]:
    """Key-wise three-way merge; returns (merged, conflicting keys). On a conflict the
    merged mapping keeps ours' value."""
    merged, conflicts = {}, []
    for key in sorted(base.keys() | ours.keys() | theirs.keys(), key=_sort_key):
        b, o, t = base.get(key, MISSING), ours.get(key, MISSING), theirs.get(key, MISSING)
        choice = pick(b, o, t)
        value = t if choice == "theirs" else o
        if choice == "both":
            conflicts.append(key)
        if value is not MISSING:
            merged[key] = value
    return merged, conflicts


def _sort_key(key):
    return key if isinstance(key, tuple) else (key,)


def changed_paths(git, a: bytes | None, b: bytes | None, skip: Callable[[bytes], bool], prefix: bytes = b"") -> Iterable[bytes]:
    """Every non-tree path that differs between trees ``a`` and ``b`` (raw oids), not
    descending into paths for which ``skip`` is true (``image.tree.diff_trees``)."""
    return (path for path, _, _ in diff_trees(git, a, b, prefix, skip))


def merge_paths(git, bases: list, ours, theirs, skip: Callable[[bytes], bool], root: bytes = b"") -> tuple[dict, list[bytes]]:
    """Path-wise three-way merge of everything under ``root`` not skipped: a path changed on
    one side takes that side; changed differently on both is a conflict (ours kept).
    Returns (changes to ours' tree, conflicting paths)."""
    def sub(image):
        if image is None:
            return None
        found = lookup(git, bytes.fromhex(image.tree), root) if root else (MODE_TREE, bytes.fromhex(image.tree))
        return found[1] if found and found[0] == MODE_TREE else None

    prefix = root + b"/" if root else b""
    t_tree = sub(theirs)
    paths = set()
    for b in bases or [None]:
        paths.update(changed_paths(git, sub(b), t_tree, skip, prefix))
    if not paths:
        return {}, []
    changes, conflicts = {}, []
    for path in sorted(paths):
        b, o, t = base_entry(git, bases, path), entry(git, ours, path), entry(git, theirs, path)
        choice = pick(b, o, t)
        if choice == "theirs":
            changes[path] = t
        elif choice == "both":
            conflicts.append(path)
    return changes, conflicts
