"""The KV-cache layer: paged, prefix-hashed, deduplicated across forks, restored bit-exactly.

Public API (docs/cache.md): ``capture``, ``restore``, ``save``, ``load``,
``fingerprint``, ``compare``, ``longest_prefix``. Importing this package imports no torch; the
functions that need torch import it when called. ``CacheLayer`` is the layer's ``Layer`` object.
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


from ..base import Layer, write_own  # noqa: E402  (after the lazy API: reading it imports no torch)


class CacheLayer(Layer):
    """Pages of the KV cache in the side store; checked out by its own writer, merged after the trace."""

    name = "cache"
    claims = (b"cache",)
    merger = "git_pf.layers.cache.merge:CacheMerger"
    needs_extra = True
    diff_paths, diff_rank = (b"cache",), 6

    def input_from_flags(self, flags):
        """``--kv`` (a safetensors file), ``--model-fingerprint`` and ``--kv-page-tokens`` (imports torch only here)."""
        if flags.get("kv") is None:
            return None
        from ...core.errors import UsageError

        try:
            from .layer import CacheInput
        except ImportError as e:
            raise UsageError(f"--kv needs torch and safetensors (install git-pf[model]): {e}") from None
        return CacheInput.from_file(flags["kv"], model=flags.get("model_fingerprint"),
                                    page_tokens=flags.get("kv_page_tokens", 16))

    def checkout_plan(self, git, image):
        return None

    def checkout(self, repo, image, plan, tmp, out, side, alone):
        from .export import write_layer

        return None, write_own(write_layer, repo, image, tmp, out, side, alone, self.name)

    def diff(self, git, a, b):
        from .diff import diff

        return diff(git, a, b)

    def summary(self, repo, image):
        from .show import summary

        return summary(repo, image)

    def object_refs(self, git, tree_hex):
        from .table import object_refs

        return object_refs(git, tree_hex)


LAYERS = (CacheLayer(),)
