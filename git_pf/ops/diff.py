"""Comparing two images layer by layer.

Each registered layer (``git_pf.layers.registry``) compares its part (``Layer.diff``:
world: files added / changed / removed; trace: messages appended or the history
rewritten, exchanges added / removed; effects: entries added and removed; env: keys
added / changed / removed; model: tensors; cache: pages), in its ``diff_rank`` order; a
layer neither image holds, and one without a diff, adds nothing. Any other path that
differs is listed by name. Every layer file is parsed by its reader (``layercheck``), so a
malformed one is a ``DataError`` naming the image, also one no layer's diff reads (the
process table). With a side store the layer that has them adds each file's unified diff,
as git prints it (``Layer.patches``). Read-only; no layer is named here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import pygit2

from ..image import manifest as img
from ..image.tree import diff_trees
from ..image.layercheck import load
from ..layers import registry


@dataclass
class ImageDiff:
    a: str
    b: str
    layers: dict[str, Any]  # layer name -> its diff (to_json(), lines(), empty), in the order diff lists them
    other: list[str]
    patches: list[tuple[bytes, bytes]] | None = None  # (real path, unified diff) per world file, with -p
    patched: str | None = None  # the layer the patches belong to

    def __getattr__(self, name: str):  # each layer's diff by the layer's name: d.world, d.trace, ...
        found = self.__dict__.get("layers", {})
        if name in found:
            return found[name]
        raise AttributeError(name)

    def to_json(self) -> dict:
        out = {"a": self.a, "b": self.b, **{name: d.to_json() for name, d in self.layers.items()},
               "other": list(self.other)}
        if self.patches is not None:
            out[self.patched]["patches"] = [{"path": os.fsdecode(p), "patch": t.decode("utf-8", "replace")}
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


def _diffed() -> list[registry.Layer]:
    return sorted(registry.layers(), key=lambda layer: layer.diff_rank)


def _covered(path: bytes, paths: tuple[bytes, ...]) -> bool:
    return any(path == p or path.startswith(p + b"/") for p in paths)


def _other(git, a, b, covered: tuple[bytes, ...]) -> list[str]:
    out = set()
    for path, _, _ in diff_trees(git, bytes.fromhex(a.tree), bytes.fromhex(b.tree)):
        if path != img.MANIFEST and not _covered(path, covered):
            out.add(os.fsdecode(path))
    return sorted(out)


def diff(git: pygit2.Repository, a: img.ImageInfo, b: img.ImageInfo, store=None) -> ImageDiff:
    """Compare ``a`` with ``b``; with a side ``store``, also each file's unified diff."""
    diffed = _diffed()
    covered = tuple(p for layer in diffed for p in layer.diff_paths)
    for image in (a, b):  # a layer file no diff reads is listed under "other" when it changed, but must parse
        for path in (p for layer in registry.layers() for p in layer.parsers if not _covered(p, covered)):
            load(git, image, path)
    layers = {layer.name: found for layer in diffed if (found := layer.diff(git, a, b)) is not None}
    patched, patches = None, None
    if store is not None:
        patched, patches = next(((layer.name, found) for layer in diffed
                                 if (found := layer.patches(git, store, a, b)) is not None), (None, None))
    return ImageDiff(a.id, b.id, layers, _other(git, a, b, covered), patches, patched)
