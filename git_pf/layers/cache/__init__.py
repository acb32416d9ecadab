"""The KV-cache layer: paged, prefix-hashed, deduplicated across forks, restored bit-exactly.

Public API (docs/cache.md): ``capture``, ``restore``, ``save``, ``load``,
``fingerprint``, ``compare``, ``longest_prefix``. Importing this package imports no torch; the
functions that need torch import it when called.
"""
from __future__ import annotations

_API = {
    "capture": "paging", "compare": "paging", "fingerprint": "paging", "Captured": "paging",
    "restore": "restoring", "restore_layers": "restoring", "CacheMismatch": "restoring",
    "save": "kvfile", "load": "kvfile", "KVFile": "kvfile",
    "CacheInput": "layer",
    "PageTable": "table",
    "longest_prefix": "prefix",
}


def __getattr__(name: str):
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'git_pf.layers.cache' has no attribute '{name}'")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = sorted(_API)


from ..registry import Layer  # noqa: E402  (after the lazy API: reading it imports no torch)

LAYERS = (Layer("cache", (b"cache",), "git_pf.layers.cache.merge:CacheMerger",
                writer="git_pf.layers.cache.export:write_layer",
                object_refs="git_pf.layers.cache.table:object_refs", summary="git_pf.layers.cache.show:summary",
                needs_extra=True),)
