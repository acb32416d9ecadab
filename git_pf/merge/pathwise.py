"""The world merge without git, where its result is provably git's: a path-wise three-way merge.

``git merge-tree`` (merge-ort) needs a process and reads every directory both sides changed.
When, in every directory both sides changed (their ids differ from the base's and from each
other), no entry is deleted or changes between a tree and a non-tree on either side and no
entry is changed differently by both (identical changes are fine), merge-ort finds no rename
that matters (a rename pairs a deleted source with an added target; one matters only where the
other side changed the source or added under a vanished directory, and either puts a deletion
in a directory both changed), merges no content and reports no conflict: its result takes,
path by path, the side that changed an entry, reuses as they are the directories only one side
changed, and writes the directories both changed (alike too: git merges those again) with git's
modes. A directory whose sides hold the base's entries with other ids only is merged from the
bytes, visiting only the entries whose ids changed (``_ids_only``). ``merge`` computes exactly
that, or declines (None) so the caller runs git: a deletion, a type change or a path changed
differently by both in a directory both changed, an entry whose mode git would rewrite
(``100664``, a zero-padded ``040000``) or cannot hold in a world (a gitlink) there, or bytes
that are no tree. The same walk lists the changes from ours' world to the result, in the
order ``treeplan.diff`` lists them (libgit2's diff of the result). Writes only the trees of
the directories both sides changed, skipping those the repository holds.
"""
from __future__ import annotations

import re

import pygit2

from ..image import safepath
from ..image.tree import MODE_LINK, TreeWriter
from . import treeplan
from .treeplan import Change

_ENTRY = re.compile(rb"(40000|100644|100755|120000) ([^\0]+)\0(.{20})", re.S)
_CANONICAL = re.compile(rb"(?:(?:40000|100644|100755|120000) [^\0]+\0.{20})*", re.S)
_DIR = b"40000"
_PACK_ABOVE = 4  # more new trees than this go into one pack, fewer are written loose


class Declined(Exception):
    """The merge needs git (the module's docstring)."""


def _shape(git, oid: bytes):
    """Tree ``oid`` as ``safepath.counterpart_shape`` reads it (its bytes, where each entry ends,
    which are subtrees; remembered, so the listing of changes reads it no more); Declined unless
    every entry has one of git's canonical modes and the entries tile the whole tree."""
    shape = safepath.counterpart_shape(git, oid)
    if shape is None or not _CANONICAL.fullmatch(shape.data):
        raise Declined
    return shape


def _entries(shape) -> dict[bytes, tuple[bytes, bytes]]:
    """``name -> (mode bytes, raw oid)`` of a tree (None: empty); Declined if a name is there twice."""
    if shape is None:
        return {}
    found = _ENTRY.findall(shape.data)
    out = {n: (m, o) for m, n, o in found}
    if len(out) != len(found):
        raise Declined
    return out


def merge(git, base: bytes | None, ours: bytes, theirs: bytes) -> tuple[bytes, list[Change]] | None:
    """The merged world of the world trees ``base`` (None: empty, unrelated histories),
    ``ours`` and ``theirs`` (raw ids) and the changes from ``ours`` to it, as git's merge
    gives them, or None where it cannot be known without git (the module's docstring)."""
    out: list[Change] = []
    made: list[tuple[bytearray, list]] = []  # each directory written: its bytes, and where its subtrees' ids go
    try:
        _walk(git, base, ours, theirs, out, made)
    except (Declined, KeyError, ValueError, pygit2.GitError):  # a missing or damaged object: git reports it
        return None
    writer = TreeWriter(git, packed=len(made) > _PACK_ABOVE)
    ids: dict[int, bytes] = {}
    for k in range(len(made) - 1, -1, -1):  # children were made after their parents
        data, holes = made[k]
        for at, child in holes:
            data[at:at + 20] = ids[child]
        ids[k] = writer.write_encoded(bytes(data))
    writer.flush()
    return ids[0], out


def _walk(git, base, ours, theirs, out: list[Change], made: list) -> None:
    """Merge the directories both sides changed, from the root (``made[0]``) down, depth
    first in git's order (so ``out`` is in diff order); each merged directory's bytes go to
    ``made`` with the places of its merged subtrees' ids. Declined where git is needed."""
    stack = [iter([(base, ours, theirs, b"", None)])]
    while stack:
        item = next(stack[-1], None)
        if item is None:
            stack.pop()
            continue
        if isinstance(item[0], bytes) and len(item) == 3:  # a change, in its place in the order
            out.append(item)
            continue
        if item[0] == "list":  # changes of a subtree taken from theirs, listed when reached
            out.extend(item[1]())
            continue
        b_oid, o_oid, t_oid, path, parent = item
        sb, so, st = (_shape(git, x) if x is not None else None for x in (b_oid, o_oid, t_oid))
        index = len(made)
        if parent is not None:
            parent[1].append((parent[0], index))
        found = _ids_only(git, sb, so, st, path, made)
        if found is not None:
            stack.append(iter(found))
            continue
        b, o, t = _entries(sb), _entries(so), _entries(st)
        keyed = []
        for name in b.keys() | o.keys() | t.keys():
            be, oe, te = b.get(name), o.get(name), t.get(name)
            kinds = {e[0] == _DIR for e in (be, oe, te) if e is not None}
            if len(kinds) > 1:  # a tree on one side, a non-tree on another
                raise Declined
            keyed.append((name + b"/" if True in kinds else name, name, be, oe, te))
        keyed.sort()
        data, holes, todo = bytearray(), [], []
        made.append((data, holes))
        for _, name, be, oe, te in keyed:
            if te == be or (oe == te and oe is not None and oe[0] != _DIR):
                take = oe
            elif oe == be:
                take = te
            else:  # changed by both: git merges a directory again even where both changed it alike
                take = None
            if take is None:
                if oe is None or te is None or oe[0] != _DIR:  # a deletion, or changed differently by both
                    raise Declined
                data += b"40000 " + name + b"\0"
                todo.append((be[1] if be else None, oe[1], te[1], path + name + b"/", (len(data), holes)))
                data += bytes(20)
                continue
            data += take[0] + b" " + name + b"\0" + take[1]
            if take is te and te != oe:
                if te[0] != _DIR:
                    old, new = ((int(oe[0], 8), oe[1]) if oe else None), (int(te[0], 8), te[1])
                    if old is not None and (old[0] == MODE_LINK) != (new[0] == MODE_LINK):
                        todo.append((path + name, old, None))  # a type change: listed as the diff lists it
                        old = None
                    todo.append((path + name, old, new))
                elif oe is None:
                    todo.append(("list", lambda t=te[1], p=path + name + b"/": treeplan.diff(git, None, t, p)))
                else:
                    todo.append(("list", lambda o=oe[1], t=te[1], p=path + name + b"/": treeplan.changes(git, o, t, p)))
        stack.append(iter(todo))


def _ids_only(git, sb, so, st, path: bytes, made: list) -> list | None:
    """A directory both sides changed where ours' and theirs' trees hold the base's entries
    (names, modes, order) and differ only in object ids, merged from the bytes alone: ours'
    tree with theirs' ids where only theirs changed; its bytes go to ``made``; what the walk
    does next (changes, directories to merge, in order). None: other entries (``_walk`` merges
    them name by name)."""
    if sb is None:
        return None
    do, dt = sb.differing(so.data), sb.differing(st.data)
    if do is None or dt is None:
        return None
    data, holes, todo, trees = bytearray(so.data), [], [], {k for k, _ in sb.trees}
    made.append((data, holes))
    mine = set(do)
    for k in sorted(mine.union(dt)):
        b_id, o_id, t_id = sb.oid(sb.data, k), so.oid(so.data, k), sb.oid(st.data, k)
        if k in mine and (k not in dt or (o_id == t_id and k not in trees)):
            continue  # ours' (or both alike, a non-tree): ours' bytes hold it
        end = sb.ends[k]
        mode, _, name = sb.data[sb.ends[k - 1] if k else 0: end - 21].partition(b" ")
        if k in trees:
            if k in mine:  # changed by both (even alike: git merges it again)
                todo.append((b_id, o_id, t_id, path + name + b"/", (end - 20, holes)))
            else:
                data[end - 20:end] = t_id
                todo.append(("list", lambda o=o_id, t=t_id, p=path + name + b"/": treeplan.changes(git, o, t, p)))
        elif k in mine:
            raise Declined  # a file changed differently by both
        else:
            data[end - 20:end] = t_id
            m = int(mode, 8)
            todo.append((path + name, (m, o_id), (m, t_id)))
    return todo
