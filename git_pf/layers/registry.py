"""The registered layers: one ``Layer`` object each (``git_pf.layers.base``), in merge order.

Each layer package declares its ``LAYERS``; the operations (snapshot, checkout, diff,
show, merge, fsck, the transport, the layer-file check) loop over ``layers()`` and call
the protocol's methods instead of naming layers. Adding a layer is adding a package
and its name to ``PACKAGES`` (docs/architecture.md). Imports only the layer packages'
``__init__`` modules, lazily; ``load`` is the one loader of ``"module:attribute"`` code.
"""
from __future__ import annotations

import importlib
from functools import lru_cache
from typing import Any, Mapping

from .base import DiffPart, Layer, covered, generic_report_line, load, naming

__all__ = ["DiffPart", "Layer", "PACKAGES", "covered", "generic_report_line", "get", "inputs_from", "layers", "load", "naming", "root", "summary_counts"]

PACKAGES = ("world", "trace", "effects", "model", "cache")  # merge order: the cache merge reads the merged trace


@lru_cache(maxsize=None)
def layers() -> tuple[Layer, ...]:
    """Every registered layer, in merge order."""
    return tuple(layer for pkg in PACKAGES for layer in importlib.import_module(f"{__package__}.{pkg}").LAYERS)


def get(name: str) -> Layer | None:
    return next((layer for layer in layers() if layer.name == name), None)


@lru_cache(maxsize=None)
def summary_counts() -> dict[str, tuple[str, ...]]:
    """Manifest key -> its fields that are counts, as the layers declare them (``Layer.counts``)."""
    out: dict[str, tuple[str, ...]] = {}
    for layer in layers():
        for key, names in layer.counts.items():
            out[key] = out.get(key, ()) + tuple(names)
    return out


def root() -> Layer:
    """The layer checkout writes into the directory itself (the sandbox's files)."""
    return next(layer for layer in layers() if layer.root)


def inputs_from(keywords: Mapping[str, Any]) -> dict[str, Any]:
    """Per-layer inputs (layer name -> that layer's input) from request keywords, each layer
    building its own from the keywords it takes; a keyword no layer takes is a TypeError."""
    taken = {k for layer in layers() for k in layer.keywords}
    unknown = sorted(set(keywords) - taken)
    if unknown:
        raise TypeError(f"unexpected keyword argument '{unknown[0]}'")
    out = {}
    for layer in layers():
        found = layer.input_from({k: keywords[k] for k in layer.keywords if k in keywords})
        if found is not None:
            out[layer.name] = found
    return out
