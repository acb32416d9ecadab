"""Comparing two images layer by layer.

Each registered layer with a ``diff`` (``git_pf.layers.registry``) compares its
part (world: files added / changed / removed; trace: messages appended or the
history rewritten, exchanges added / removed; effects: entries added and removed;
env: keys added / changed / removed), in its ``diff_rank`` order; any other path
that differs is listed by name. Every layer file is parsed by its reader
(``layercheck``), so a malformed one is a ``DataError`` naming the image, also
one no layer's diff reads (the process table). With ``patch=True`` the world's
files also get their unified diff, as git prints it (``worldpatch``). Read-only.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pygit2

from . import image as img, worldpatch
from .errors import DataError
from .gittree import diff_trees
from .layercheck import load
from .layers import registry


@dataclass
class ImageDiff:
    a: str
    b: str
    layers: dict[str, Any]  # layer name -> its diff (to_json(), lines(), empty), in the order diff lists them
    other: list[str]
    patches: list[tuple[bytes, bytes]] | None = None  # (real path, unified diff) per world file, with -p

    def __getattr__(self, name: str):  # each layer's diff by the layer's name: d.world, d.trace, ...
        found = self.__dict__.get("layers", {})
        if name in found:
            return found[name]
        raise AttributeError(name)

    def to_json(self) -> dict:
        out = {"a": self.a, "b": self.b, **{name: d.to_json() for name, d in self.layers.items()},
               "other": list(self.other)}
        if self.patches is not None:
            out[_patched_layer()]["patches"] = [{"path": os.fsdecode(p), "patch": t.decode("utf-8", "replace")}
                                                for p, t in self.patches]
        return out

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        """The human summary: each layer's lines (counts only with ``stat``; no world paths
        with ``patch``), then each other path that changed."""
        return [line for d in self.layers.values() for line in d.lines(stat, patch)] + \
            [f"other:   {path} changed" for path in self.other]

    @property
    def patch(self) -> bytes:
        """Every world file's unified diff, concatenated: what ``git diff`` would print."""
        return b"".join(t for _, t in self.patches or [])

    @property
    def empty(self) -> bool:
        return all(d.empty for d in self.layers.values()) and not self.other


def _patched_layer() -> str:
    """The layer the world's unified diffs belong to: the one claiming ``world/fs``."""
    return next(layer.name for layer in registry.layers() if img.WORLD_FS in layer.claims)


def _diffed() -> list[registry.Layer]:
    return sorted((layer for layer in registry.layers() if layer.diff), key=lambda layer: layer.diff_rank)


def _covered(path: bytes, paths: tuple[bytes, ...]) -> bool:
    return any(path == p or path.startswith(p + b"/") for p in paths)


def _other(git, a, b, covered: tuple[bytes, ...]) -> list[str]:
    out = set()
    for path, _, _ in diff_trees(git, bytes.fromhex(a.tree), bytes.fromhex(b.tree)):
        if path != img.MANIFEST and not _covered(path, covered):
            out.add(os.fsdecode(path))
    return sorted(out)


def _patches(git, store, a: img.ImageInfo, b: img.ImageInfo) -> list[tuple[bytes, bytes]]:
    pa, pb = ({p for p, e in load(git, x, img.WORLD_ATTRS, {}).items() if e.pointer} for x in (a, b))
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    try:
        return worldpatch.patches(git, store, ta, tb, pa, pb)
    except DataError as e:
        raise DataError(f"images {a.short}..{b.short}: {e.message}", e.code) from None


def diff(git: pygit2.Repository, a: img.ImageInfo, b: img.ImageInfo, store=None) -> ImageDiff:
    """Compare ``a`` with ``b``; with a side ``store``, also each world file's unified diff."""
    diffed = _diffed()
    covered = tuple(p for layer in diffed for p in layer.diff_paths)
    for image in (a, b):  # a layer file no diff reads is listed under "other" when it changed, but must parse
        for path in (p for layer in registry.layers() for p in layer.parsers if not _covered(p, covered)):
            load(git, image, path)
    layers = {layer.name: registry.load(layer.diff)(git, a, b) for layer in diffed}
    return ImageDiff(a.id, b.id, layers, _other(git, a, b, covered),
                     _patches(git, store, a, b) if store is not None else None)
