"""The world layer merger: ``world/fs`` by git's own tree merge, ``fs.attrs`` key-wise.

The sandbox tree merges exactly as ``git merge-tree --write-tree`` merges it
(line-level for text, rename-aware, exec bits kept, criss-cross through git's
virtual base; see ``gitmerge``). On top of git's rules, a side-store pointer
that no side wrote (two sides changed one large file differently) is a
conflict. ``fs.attrs`` merges key-wise (``fsattrs``) and pointer flags are
derived from the merged blobs. Writes only git objects.
"""
from __future__ import annotations

import os

from ...image import manifest as img
from ...image.tree import MODE_EXEC, MODE_FILE, MODE_TREE, blob_size, lookup, read_pointer
from . import attrs as attrs_mod
from .names import real_path, tree_path
from . import merge_attrs as fsattrs
from . import gitmerge
from ...merge.layer import LayerResult, MergeContext, check_merged_tree
from . import SUMMARY_FIELDS
from ...merge.tree3 import AMBIGUOUS, blob, entry, pick
from ...merge import pathwise, treeplan
from ...image import safepath



class WorldMerger:
    """``start`` launches git's merge (so other layers can merge while git runs); ``merge`` finishes."""

    name = "world"

    def __init__(self):
        self._started = None

    def start(self, ctx: MergeContext) -> None:
        git = ctx.repo.git
        pair = lambda image: (entry(git, image, img.WORLD_FS), entry(git, image, img.WORLD_ATTRS))  # noqa: E731
        found = {pair(b) for b in ctx.bases} or {(None, None)}
        base = found.pop() if len(found) == 1 else AMBIGUOUS
        ours, theirs = pair(ctx.ours), pair(ctx.theirs)
        choice = pick(base, ours, theirs)
        proc = stand = fast = None
        if choice == "both" and len(ctx.bases) <= 1:  # where git's result is known without git: no process
            fast = _pathwise(git, base[0], ours[0], theirs[0])
        if choice == "both" and fast is None:
            try:
                stand = gitmerge.stand_ins(git, ctx.ours.id, ctx.theirs.id, [b.id for b in ctx.bases])
                proc = gitmerge.start_merge_tree(ctx.repo.git_dir, *stand, unrelated=not ctx.bases)
            except BaseException:
                ctx.check_sides()  # a world libgit2 cannot parse (for a stand-in commit): named as the checks name it
                raise
        self._started = (choice, theirs, stand, proc, fast)
        try:
            ctx.check_sides()  # while git merges; before anything here uses a world (the path-wise walk
            # only reads trees, and what it wrote is used only once both sides passed)
        except BaseException:
            self.cancel()
            raise

    def cancel(self) -> None:
        """Stop git's merge if it was started and not collected (the merge was refused or failed)."""
        proc = self._started[3] if self._started else None
        self._started = None
        if proc is not None:
            proc.kill()
            proc.communicate()

    def merge(self, ctx: MergeContext) -> LayerResult:
        if self._started is None:
            self.start(ctx)
        choice, theirs, stand, proc, fast = self._started
        self._started = None
        if choice in ("unchanged", "same", "ours"):
            return LayerResult("world", True, report={"resolution": choice}, trailer=f"world {choice}")
        if choice == "theirs":
            summary = _fields(ctx.theirs.manifest.get("layers", {}).get("world"))
            return LayerResult("world", True, {img.WORLD_FS: theirs[0], img.WORLD_ATTRS: theirs[1]}, summary,
                               {"resolution": "theirs"}, trailer="world theirs")
        if fast is not None:
            return _three_way(ctx, None, gitmerge.TreeMerge(fast[0].hex(), True), _prepare(ctx), fast[1])
        try:
            prepared = _prepare(ctx)  # what needs no answer from git, while git merges
        except BaseException:
            proc.kill()
            proc.communicate()
            raise
        return _three_way(ctx, stand, gitmerge.finish(proc), prepared)


def _pathwise(git, base, ours, theirs) -> tuple[bytes, list] | None:
    """git's merged world and the changes from ours' to it, merged path-wise in this process where
    that is provably git's result (``merge.pathwise``); None: git merges."""
    if ours is None or theirs is None or ours[0] != MODE_TREE or theirs[0] != MODE_TREE:
        return None
    if base is not None and base[0] != MODE_TREE:
        return None
    return pathwise.merge(git, base[1] if base else None, ours[1], theirs[1])


def _fields(summary: dict | None) -> dict | None:
    return {k: summary[k] for k in SUMMARY_FIELDS if k in summary} if summary else None


def _attrs(git, image) -> dict:
    data = img.read_file(git, image.tree, img.WORLD_ATTRS) if image is not None else None
    return attrs_mod.decode(data or b"")


def _pointer_oids(git, image, attrs: dict) -> set[bytes]:
    world = entry(git, image, img.WORLD_FS)
    out = set()
    for path, e in attrs.items():
        if e.pointer and world is not None:
            found = lookup(git, world[1], tree_path(path))
            if found is not None:
                out.add(found[1])
    return out


def _prepare(ctx: MergeContext) -> tuple[list[dict], set[bytes]]:
    """What the three-way merge reads that git's answer does not change, read while git merges:
    each side's attrs and the pointers among their blobs."""
    git = ctx.repo.git
    sides = [ctx.ours, ctx.theirs, *ctx.bases]
    attrs = [_attrs(git, s) for s in sides]
    return attrs, set().union(*(_pointer_oids(git, s, a) for s, a in zip(sides, attrs)))


def _three_way(ctx: MergeContext, stand: tuple[str, str] | None, tm: gitmerge.TreeMerge, prepared,
               changed=None) -> LayerResult:
    """The world layer's result from git's merged world ``tm``; ``changed``: the changes from
    ours' world to it, when the merge was made here (``_pathwise``; ``stand`` None)."""
    git = ctx.repo.git
    attrs, pointer_oids = prepared
    if changed is not None:
        _vouch(ctx, tm.tree)
    else:
        ours_world = entry(git, ctx.ours, img.WORLD_FS)
        if ours_world is not None:  # before the check: it compares git's trees with ours' read here
            changed = treeplan.changes(git, ours_world[1], bytes.fromhex(tm.tree))
        else:
            changed = treeplan.diff(git, None, bytes.fromhex(tm.tree))
        if tm.clean:
            check_merged_tree(ctx, tm.tree)
    conflicts = _git_conflicts(tm, attrs, pointer_oids)
    pointers = {p for p, e in attrs[0].items() if e.pointer}
    flagged = {p for a in attrs for p, e in a.items() if e.pointer}
    touched, sizes = set(), _Sizes(git, pointer_oids)
    for path, old, new in changed:
        real = real_path(path)
        touched.add(real)
        pointers.discard(real)
        if new is not None and new[1] in pointer_oids:
            pointers.add(real)
        elif (new is not None and real in flagged and new != _at(git, ctx.theirs, path)
              and all(c["path"] != os.fsdecode(real) for c in conflicts)):
            # git merged a pointer's text: the result is a pointer no side wrote
            conflicts.append({"path": os.fsdecode(real), "kind": "pointer",
                              "message": f"CONFLICT (pointer): both sides changed large file '{os.fsdecode(real)}'"})
    merged_tree = bytes.fromhex(tm.tree)
    mode_of = lambda p: (lookup(git, merged_tree, tree_path(p)) or (None,))[0]  # noqa: E731
    merged_attrs, attr_lines = fsattrs.merge(attrs[2:], attrs[0], attrs[1], pointers=pointers, touched=touched,
                                             mode_of=mode_of)
    conflicts += [{"path": None, "kind": "attrs", "message": line} for line in attr_lines]
    changes = {img.WORLD_FS: (MODE_TREE, merged_tree), img.WORLD_ATTRS: blob(git, attrs_mod.encode(list(merged_attrs.values())))}
    summary = _summary(ctx.ours.manifest.get("layers", {}).get("world"), changed, sizes)
    report = {"resolution": "conflict" if conflicts else "merged", "changed": len(changed), "conflicts": conflicts}
    trailer = f"world merged changed={len(changed)}"
    result = LayerResult("world", not conflicts, changes, summary, report, [c["message"] for c in conflicts], trailer)
    if stand is None and conflicts:  # an attrs conflict of a world merged here: --checkout runs git
        stand = gitmerge.stand_ins(git, ctx.ours.id, ctx.theirs.id, [b.id for b in ctx.bases])
    ours_c, theirs_c = stand or (None, None)
    result.detail = {"ours": ours_c, "theirs": theirs_c, "unrelated": not ctx.bases, "merge": tm,
                     "attrs": merged_attrs, "pointer_oids": pointer_oids}
    return result


def _vouch(ctx: MergeContext, tree: str) -> None:
    """Mark sound a world merged here from two sound worlds: each of its directories is one of
    theirs or ours as it is, or holds, once each and in git's order, entries of theirs' and ours'
    directories at the same path, so it passes every check a tree of them passed. Where a side
    is not known sound (it always is once ``check_sides`` ran), the world is checked instead."""
    git = ctx.repo.git
    sides = [img.subtree(git, side.tree, img.WORLD_FS) for side in (ctx.ours, ctx.theirs)]
    if all(s and safepath.is_sound(git, s) for s in sides):
        safepath.mark_sound(git, bytes.fromhex(tree))
    else:
        check_merged_tree(ctx, tree)


def _at(git, image, path: bytes):
    world = entry(git, image, img.WORLD_FS)
    return lookup(git, world[1], path) if world else None


class _Sizes:
    """Blob sizes, each read once; pointer blobs give the size of the file they stand for."""

    def __init__(self, git, pointer_oids: set[bytes]):
        self.git, self.pointer_oids, self.cache = git, pointer_oids, {}

    def raw(self, oid: bytes) -> int:
        if oid not in self.cache:
            self.cache[oid] = blob_size(self.git, oid)
        return self.cache[oid]

    def file(self, oid: bytes) -> int:
        if oid in self.pointer_oids:
            try:
                return read_pointer(self.git, oid).size
            except ValueError:
                pass
        return self.raw(oid)


def _git_conflicts(tm: gitmerge.TreeMerge, attrs: list[dict], pointer_oids: set[bytes]) -> list[dict]:
    """git's conflict messages; a conflict on a side-store pointer is named as such."""
    flagged = {p for a in attrs for p, e in a.items() if e.pointer}
    staged_pointers = {s.path for s in tm.stages if bytes.fromhex(s.oid) in pointer_oids}
    out = []
    for m in tm.messages:
        if not m.kind.startswith("CONFLICT"):
            continue
        path = m.paths[0] if m.paths else None
        real = real_path(path) if path is not None else None
        kind = m.kind[len("CONFLICT ("):-1] if m.kind.endswith(")") else m.kind
        if path is not None and (real in flagged or path in staged_pointers):
            kind, text = "pointer", f"CONFLICT (pointer): both sides changed large file '{os.fsdecode(real)}'"
        else:
            text = m.text
        item = {"path": os.fsdecode(real) if real is not None else None, "kind": kind, "message": text}
        if item not in out:
            out.append(item)
    return out


def _summary(ours: dict | None, changed, sizes: _Sizes) -> dict | None:
    if not ours or any(k not in ours for k in SUMMARY_FIELDS):
        return None
    out = {k: ours[k] for k in SUMMARY_FIELDS}
    for _, old, new in changed:
        for sign, e in ((-1, old), (1, new)):
            if e is None:
                continue
            out["files"] += sign
            if e[0] in (MODE_FILE, MODE_EXEC):
                out["pointers"] += sign * (e[1] in sizes.pointer_oids)
                out["bytes"] += sign * sizes.file(e[1])
    return out
