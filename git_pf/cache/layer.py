"""The snapshot side of the KV layer: a ``LayerInput`` writing ``cache/pages.json``.

Page bytes go to the side store, one object per page named by the sha256 of
its bytes, so a page a fork shares with its parent is stored once. The
manifest summary records tokens, pages and bytes (``git pf show`` adds
the pages shared with the parent). Writes no refs.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from .. import image as img
from ..errors import UsageError
from .pages import DEFAULT_PAGE_TOKENS, IO_WORKERS, batches
from .table import PATH

if TYPE_CHECKING:
    from .paging import Captured

NAME = "cache"
# zstd level of page objects: fp16/fp32 activations gain ~8% from entropy coding,
# which level 1 gets at twice the speed of the store's default (docs/cache.md).
PAGE_ZSTD_LEVEL = 1


def store_pages(store, captured: "Captured") -> int:
    """Put every page into ``store``; returns how many objects were new."""
    def job(items) -> int:
        new = [(oid, data) for oid, data in items if not store.has(oid)]
        for oid, data in new:
            store.put(data, oid, level=PAGE_ZSTD_LEVEL)
        return len(new)

    unique = {p.sha256: d for p, d in zip(captured.table.pages, captured.data)}
    with ThreadPoolExecutor(IO_WORKERS) as pool:
        return sum(pool.map(job, batches(list(unique.items()))))


class CacheInput:
    """A captured KV cache to write into the next snapshot."""

    name = NAME

    def __init__(self, captured: "Captured"):
        self.captured = captured
        self.new_objects = 0

    @classmethod
    def from_cache(cls, cache, token_ids, *, model, adapter=None, page_tokens=DEFAULT_PAGE_TOKENS) -> "CacheInput":
        from .paging import capture

        return cls(capture(cache, token_ids, model=model, adapter=adapter, page_tokens=page_tokens))

    @classmethod
    def from_file(cls, path: Path, model: str | None = None, adapter: str | None = None,
                  page_tokens: int = DEFAULT_PAGE_TOKENS) -> "CacheInput":
        """From an interchange file; ``model`` / ``adapter`` override what the file records."""
        from .kvfile import load

        kv = load(path)
        if model and kv.model and model != kv.model:
            raise UsageError(f"--model-fingerprint '{model}' differs from the model '{kv.model}' recorded in '{path}'")
        model = model or kv.model
        if not model:
            raise UsageError(f"--kv: '{path}' records no model fingerprint; give --model-fingerprint")
        return cls.from_cache(kv.layers, kv.tokens, model=model, adapter=adapter or kv.adapter,
                              page_tokens=page_tokens)

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        self.new_objects = store_pages(repo.store, self.captured)
        table = self.captured.table
        edit.put_file(PATH, table.encode())
        return table.summary()
