"""The world layers' part of ``git pf diff``: files added / changed / removed (plus
attribute-only changes) between two images' ``world/fs`` trees, and environment keys
added / changed / removed. Layer files are parsed by their readers (``layercheck``), so a
malformed one is a ``DataError`` naming the image. Read-only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

from ...image import manifest as img
from ...image.tree import diff_trees
from ...image.layercheck import load
from ..registry import DiffPart
from .env import Env
from .names import real_path


def _counts(label: str, added: list, changed: list, removed: list) -> str:
    return f"{label:<9}{len(added)} added, {len(changed)} changed, {len(removed)} removed"


@dataclass
class WorldDiff(DiffPart):
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    attrs_changed: list[str] = field(default_factory=list)

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        out = [_counts("world:", self.added, self.changed, self.removed)
               + (f", {len(self.attrs_changed)} attrs changed" if self.attrs_changed else "")]
        if not stat and not patch:
            for sign, paths in (("A", self.added), ("M", self.changed), ("D", self.removed), ("T", self.attrs_changed)):
                out += [f"  {sign} {p}" for p in paths]
        return out


@dataclass
class EnvDiff(DiffPart):
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        out = [_counts("env:", self.added, self.changed, self.removed)]
        if not stat:
            for sign, keys in (("A", self.added), ("M", self.changed), ("D", self.removed)):
                out += [f"  {sign} {k}" for k in keys]
        return out


def diff_world(git, a: img.ImageInfo, b: img.ImageInfo) -> WorldDiff:
    aa, ab = (load(git, x, img.WORLD_ATTRS, {}) for x in (a, b))
    out = WorldDiff()
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    for path, old, new in diff_trees(git, bytes.fromhex(ta) if ta else None, bytes.fromhex(tb) if tb else None):
        bucket = out.added if old is None else out.removed if new is None else out.changed
        bucket.append(os.fsdecode(real_path(path)))
    touched = set(out.added) | set(out.changed) | set(out.removed)
    for p in sorted(aa.keys() | ab.keys()):
        ja, jb = (x[p].to_json() if p in x else None for x in (aa, ab))
        if ja != jb and os.fsdecode(p) not in touched:
            out.attrs_changed.append(os.fsdecode(p))
    return out


def diff_env(git, a: img.ImageInfo, b: img.ImageInfo) -> EnvDiff:
    va, vb = (load(git, x, img.WORLD_ENV, Env()).vars for x in (a, b))
    return EnvDiff(sorted(vb.keys() - va.keys()), sorted(k for k in va.keys() & vb.keys() if va[k] != vb[k]),
                   sorted(va.keys() - vb.keys()))


def patches(git, store, a: img.ImageInfo, b: img.ImageInfo) -> list[tuple[bytes, bytes]]:
    """Each changed world file's unified diff, as git prints it (``patch``)."""
    from . import patch as worldpatch
    from ...core.errors import DataError

    pa, pb = ({p for p, e in load(git, x, img.WORLD_ATTRS, {}).items() if e.pointer} for x in (a, b))
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    try:
        return worldpatch.patches(git, store, ta, tb, pa, pb)
    except DataError as e:
        raise DataError(f"images {a.short}..{b.short}: {e.message}", e.code) from None
