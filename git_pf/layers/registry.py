"""The registered layers: what each layer of an image provides, and where the code is.

Each layer package declares its ``LAYERS`` (a ``Layer`` each: the world
package declares ``world`` and ``env``) with its code named as
``"module:attribute"`` strings, so reading the registry imports no torch; the
operations (checkout, merge, fsck, transport, the layer-file check) load what
they use from here instead of naming layers. Adding a layer is adding a
package and its name to ``PACKAGES`` (docs/architecture.md). Imports only
the layer packages' ``__init__`` modules, lazily.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

PACKAGES = ("world", "trace", "effects", "model", "cache")  # merge order: the cache merge reads the merged trace


@dataclass(frozen=True)
class Layer:
    """One layer as checkout, merge, fsck and the transport see it."""

    name: str  # as the CLI names it: --layers, --prefer, Pf-Merge trailers
    claims: tuple[bytes, ...]  # image-tree paths (files or trees) the layer owns
    merger: str  # "module:Class" implementing git_pf.merge.layer.LayerMerger
    parsers: dict[bytes, str] = field(default_factory=dict)  # layer file -> "module:function" (DataError if malformed)
    files: tuple[bytes, ...] = ()  # what checkout writes as they are (a tree: its files)
    writer: str | None = None  # "module:function"(repo, image, dest): a checkout writer of its own
    object_refs: str | None = None  # "module:function"(git, tree_hex): side-store objects named without pointers
    summary_key: str | None = None  # manifest "layers" key when not the layer's name ...
    summary_fields: tuple[str, ...] | None = None  # ... and the fields of it the layer owns
    needs_extra: bool = False  # its code needs the model extra (torch): a merge falls back without it

    @property
    def manifest_key(self) -> str:
        return self.summary_key or self.name


def load(spec: str) -> Any:
    """The attribute a ``"module:attribute"`` string names (``attribute`` may be dotted)."""
    module, _, attr = spec.partition(":")
    found = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


@lru_cache(maxsize=None)
def layers() -> tuple[Layer, ...]:
    """Every registered layer, in merge order."""
    return tuple(layer for pkg in PACKAGES for layer in importlib.import_module(f"{__package__}.{pkg}").LAYERS)


def get(name: str) -> Layer | None:
    return next((layer for layer in layers() if layer.name == name), None)
