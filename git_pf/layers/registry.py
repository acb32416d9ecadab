"""The registered layers: what each layer of an image provides, and where the code is.

Each layer package declares its ``LAYERS`` (a ``Layer`` each: the world
package declares ``world`` and ``env``) with its code named as
``"module:attribute"`` strings, so reading the registry imports no torch; the
operations (snapshot, checkout, diff, show, merge, fsck, transport, the
layer-file check) load what they use from here instead of naming layers. Adding a layer is adding a
package and its name to ``PACKAGES`` (docs/architecture.md). Imports only
the layer packages' ``__init__`` modules, lazily.
"""
from __future__ import annotations

import importlib
from dataclasses import asdict, dataclass, field, fields
from functools import lru_cache
from typing import Any

PACKAGES = ("world", "trace", "effects", "model", "cache")  # merge order: the cache merge reads the merged trace


@dataclass(frozen=True)
class Layer:
    """One layer as snapshot, checkout, diff, show, merge, fsck and the transport see it."""

    name: str  # as the CLI names it: --layers, --prefer, Pf-Merge trailers
    claims: tuple[bytes, ...]  # image-tree paths (files or trees) the layer owns
    merger: str  # "module:Class" implementing git_pf.merge.layer.LayerMerger
    parsers: dict[bytes, str] = field(default_factory=dict)  # layer file -> "module:function" (DataError if malformed)
    tree_checks: dict[bytes, str] = field(default_factory=dict)  # layer tree -> "module:function"(git, image tree)
    # -> {path: one line} for each bad entry (the tape)
    files: tuple[bytes, ...] = ()  # what checkout writes as they are (a tree: its files)
    writer: str | None = None  # "module:function"(repo, image, dest): a checkout writer of its own
    object_refs: str | None = None  # "module:function"(git, tree_hex): side-store objects named without pointers
    summary_key: str | None = None  # manifest "layers" key when not the layer's name ...
    summary_fields: tuple[str, ...] | None = None  # ... and the fields of it the layer owns
    needs_extra: bool = False  # its code needs the model extra (torch): a merge falls back without it
    input: str | None = None  # "module:function"(SnapshotWrite) -> {manifest key: summary}: writes what a
    #   snapshot gives the layer, else what it inherits; None: its LayerInputs, else the parent's files kept
    diff: str | None = None  # "module:function"(git, a, b) -> its diff: to_json(), lines(stat, patch), empty
    diff_paths: tuple[bytes, ...] = ()  # the paths (files or trees) its diff reads: other changes are "other"
    diff_rank: int = 0  # where diff lists it (lowest first)
    summary: str | None = None  # "module:function"(repo, image) -> what show adds (to_json(), lines()) or None
    fsck: str | None = None  # "module:function"(git, store, image, seen, remote_has) -> problem lines,
    #   run when its parsed files parse

    @property
    def manifest_key(self) -> str:
        return self.summary_key or self.name


class DiffPart:
    """A base for a layer's diff (a dataclass): ``to_json()`` is its fields, and it is
    ``empty`` when every field is (a layer overrides what its fields do not say)."""

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f.name) for f in fields(self))


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
