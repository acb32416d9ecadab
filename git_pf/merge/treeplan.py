"""git's merge of two world trees foreseen from the trees it merged, where that is plain.

``git merge-tree`` merges the worlds (``layers.world.gitmerge``) and writes the directories it
merged as new loose trees; reading and checking them, then diffing them against ours', is most
of what a first merge adds to git's own time. This module foresees git's merged world from the
base's, ours' and theirs' trees (already read, or packed): a directory one side changed is that
side's; in a directory both sides changed whose entries (names, modes, order) are the base's on
both sides, an entry one side changed is that side's, a subdirectory both changed is foreseen
the same way, and a file both changed is git's (a hole, read from git's result). Nothing
foreseen is trusted: ``Forecast.changes`` compares git's tree with the forecast (by id where the
forecast is whole, else by reading the directory and comparing its bytes with ours') and lists
the changes from ours' world only when every part matches; anything else (renames, names added
or removed, a mode changed) returns None and the caller diffs git's result as before. The trees
foreseen whole are handed to ``safepath.learn_tree`` and ours' are read as they are
(``safepath.counterpart_shape``), so the safety check of git's result reads the former from
memory and compares them with the latter; they are checked as any tree is. Reads trees only;
writes nothing.
"""
from __future__ import annotations

import pygit2

from ..image import safepath
from ..image.tree import TreeWriter

Change = tuple[bytes, tuple[int, bytes] | None, tuple[int, bytes] | None]  # (path, old, new)
_TREE = pygit2.enums.ObjectType.TREE
HOLE = None  # a file both sides changed: git merges it, its id is read from git's result


def diff(git, a: bytes | None, b: bytes, prefix: bytes = b"") -> list[Change]:
    """Changed non-tree paths from tree ``a`` (None: empty) to ``b`` by libgit2's tree diff (no
    renames), each path under ``prefix``: ``(path, (mode, raw oid) or None, same)``."""
    a = a or TreeWriter(git).write([])
    out = []
    for d in git[pygit2.Oid(raw=a)].diff_to_tree(git[pygit2.Oid(raw=b)]).deltas:
        old, new = d.old_file, d.new_file
        o_mode, n_mode = old.mode, new.mode  # each read makes an enum member: read once
        o = (o_mode, old.id.raw) if o_mode else None
        n = (n_mode, new.id.raw) if n_mode else None
        out.append((prefix + (new.raw_path if n else old.raw_path), o, n))
    return out


class _Theirs:
    """A subtree only theirs changed: git's result holds theirs' tree there (ours' is ``ours``,
    at ``path``)."""

    __slots__ = ("ours", "tree", "path")

    def __init__(self, ours: bytes, tree: bytes, path: bytes):
        self.ours, self.tree, self.path = ours, tree, path


class _Dir:
    """A directory both sides changed, entries as the base's: ``entries`` are (index, mode,
    path, expected) for each entry git's result holds with another id than ours': a file's
    new id, HOLE, or the node of a subtree; ``oid`` is the forecast tree's id when whole."""

    __slots__ = ("ours", "data", "shape", "entries", "oid")

    def __init__(self, ours: bytes, data: bytes, shape, entries: list, oid: bytes | None):
        self.ours, self.data, self.shape, self.entries, self.oid = ours, data, shape, entries, oid


class Forecast:
    """git's merged world as foreseen from the base's, ours' and theirs' world trees."""

    THEIRS_DIFFS = 8  # subtrees only theirs changed that are diffed one by one; more: one diff of all

    def __init__(self, git, root):
        self.git, self.root = git, root

    def changes(self, merged: bytes) -> list[Change] | None:
        """The changes from ours' world to git's merged world ``merged`` (raw id) in tree order,
        as libgit2's diff lists them, when git's result is the one foreseen; None otherwise, and
        where more than ``THEIRS_DIFFS`` subtrees are theirs' as they are (one diff of the whole
        world, by the caller, lists them at less cost than a diff each)."""
        out: list = []
        if not self._match(self.root, merged, out) or sum(isinstance(c, _Theirs) for c in out) > self.THEIRS_DIFFS:
            return None
        return [c for x in out for c in (diff(self.git, x.ours, x.tree, x.path + b"/" if x.path else b"")
                                         if isinstance(x, _Theirs) else (x,))]

    def _match(self, node, tree: bytes, out: list) -> bool:
        if isinstance(node, bytes):  # ours' tree, unchanged
            return tree == node
        if isinstance(node, _Theirs):
            out.append(node)  # its changes: theirs' tree diffed against ours'
            return tree == node.tree
        shape = node.shape
        if node.oid is not None:  # foreseen whole: the id says it all
            if tree != node.oid:
                return False
            data = None
        else:
            kind, data = self.git.odb.read(pygit2.Oid(raw=tree))
            found = shape.differing(data) if kind == _TREE else None
            if found is None or not set(found) <= {k for k, _, _, _ in node.entries}:
                return False
        for k, mode, path, want in node.entries:
            old = shape.oid(node.data, k)
            if isinstance(want, bytes) or want is HOLE:
                new = want if data is None else shape.oid(data, k)
                if want is not HOLE and new != want:
                    return False
                if new != old:
                    out.append((path, (mode, old), (mode, new)))
            elif not self._match(want, _id(want) if data is None else shape.oid(data, k), out):
                return False
        return True


def _id(node) -> bytes:
    """The id git's result holds for a subtree node foreseen whole."""
    return node.tree if isinstance(node, _Theirs) else node.oid


def forecast(git, base: bytes, ours: bytes, theirs: bytes) -> Forecast | None:
    """git's merge of world trees ``ours`` and ``theirs`` (raw ids) over ``base`` as foreseen,
    or None where the top directory is not plain (or a tree cannot be read: git will say)."""
    try:
        root = _node(git, b"", base, ours, theirs)
    except (KeyError, ValueError, pygit2.GitError):
        return None
    return Forecast(git, root) if root is not None else None


def _node(git, path: bytes, b: bytes, o: bytes, t: bytes):
    if t in (o, b):
        return o
    if o == b:
        return _Theirs(o, t, path)
    return _dir(git, path, b, o, t)


def _read(git, oid: bytes) -> bytes | None:
    kind, data = git.odb.read(pygit2.Oid(raw=oid))
    return data if kind == _TREE else None


def _dir(git, path: bytes, b: bytes, o: bytes, t: bytes) -> _Dir | None:
    shape = safepath.counterpart_shape(git, o)  # remembered: git's result is compared with it
    data_b, data_t = _read(git, b), _read(git, t)
    if shape is None or data_b is None or data_t is None:
        return None
    data_o = shape.data
    from_b, from_t = shape.differing(data_b), shape.differing(data_t)
    if from_b is None or from_t is None:
        return None
    subtrees = dict(shape.trees)
    prefix = path + b"/" if path else b""
    entries, whole, ends = [], True, shape.ends
    for k in sorted({*from_b, *from_t}):
        ob, oo, ot = shape.oid(data_b, k), shape.oid(data_o, k), shape.oid(data_t, k)
        if ot in (oo, ob):
            continue  # ours' entry stays
        head = data_o[ends[k - 1] if k else 0: ends[k] - 21]
        mode, _, name = head.partition(b" ")
        if k in subtrees:
            want = _node(git, prefix + name, ob, oo, ot)
            if want is None:
                return None
            whole = whole and (not isinstance(want, _Dir) or want.oid is not None)
        else:
            want = ot if oo == ob else HOLE
            whole = whole and want is not HOLE
        entries.append((k, int(mode, 8), prefix + name, want))
    oid = None
    if whole:  # ours' bytes with the ids git will write
        parts, at = [], 0
        for k, _, _, want in entries:
            end = ends[k]
            parts += [data_o[at:end - 20], want if isinstance(want, bytes) else _id(want)]
            at = end
        parts.append(data_o[at:])
        oid = safepath.learn_tree(b"".join(parts))
    return _Dir(o, data_o, shape, entries, oid)
