"""``git_pf.cache``: the KV-cache API as docs/cache.md names it (``save``, ``load``, ``capture``,
``restore``, ``longest_prefix`` ...), the public names of ``git_pf.layers.cache``. Imports no
torch until a function that needs it is called.
"""
from __future__ import annotations

from .layers import cache as _layer

__all__ = _layer.__all__


def __getattr__(name: str):
    return getattr(_layer, name)
