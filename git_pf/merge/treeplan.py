"""The changes from ours' world to git's merged world, each tree read once.

``git merge-tree`` merges the worlds (``layers.world.gitmerge``) and writes the directories it
merged as new loose trees. The merge needs the changes from ours' world to git's (the manifest's
counts, pointer flags, the attrs of the paths touched) and, for a merged world not found sound
yet, the safety check of git's trees. ``changes`` walks both worlds together: where a directory
of git's world holds ours' entries at the same path (names, modes, order: the two differ only
inside object ids), only its entries of other ids are visited, from the bytes of both; any
other directory (a name added, removed or renamed, a mode changed) is diffed by libgit2
(``diff``). Ours' trees are read as they are (``safepath.counterpart_shape``: where each entry
ends, nothing checked), so the check of git's world that follows compares each of its
directories with ours' at the same path instead of parsing it, and finds git's trees in
libgit2's cache; they vouch for nothing and are checked as any tree is. Reads trees only;
writes nothing.
"""
from __future__ import annotations

import pygit2

from ..image import safepath
from ..image.tree import TreeWriter

Change = tuple[bytes, tuple[int, bytes] | None, tuple[int, bytes] | None]  # (path, old, new)
_TREE = pygit2.enums.ObjectType.TREE


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


def changes(git, a: bytes, b: bytes, prefix: bytes = b"") -> list[Change]:
    """What ``diff`` lists from tree ``a`` (ours' world) to ``b`` (git's merged world), in the
    same order, each tree read once (the module's docstring)."""
    odb, out = git.odb, []
    stack = [iter(([a, b, prefix],))]  # an iterator per directory: a list is a pair of directories
    while stack:  # still to visit, a tuple a change; iterative: a world may nest deeper than
        item = next(stack[-1], None)  # Python's recursion limit
        if item is None:
            stack.pop()
        elif isinstance(item, tuple):
            out.append(item)
        else:
            old, new, path = item
            shape = safepath.counterpart_shape(git, old)
            kind, data = odb.read(pygit2.Oid(raw=new))
            found = shape.differing(data) if shape is not None and kind == _TREE else None
            if found is None:  # not ours' entries: libgit2 lists this directory's changes
                out += diff(git, old, new, path)
                continue
            trees, ends, data_o, items = {k for k, _ in shape.trees}, shape.ends, shape.data, []
            for k in found:
                mode, _, name = data_o[ends[k - 1] if k else 0: ends[k] - 21].partition(b" ")
                o, n = shape.oid(data_o, k), shape.oid(data, k)
                if k in trees:
                    items.append([o, n, path + name + b"/"])
                else:
                    m = int(mode, 8)
                    items.append((path + name, (m, o), (m, n)))
            stack.append(iter(items))
    return out
