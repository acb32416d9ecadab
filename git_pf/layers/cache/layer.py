"""The snapshot side of the KV layer: a ``LayerInput`` writing ``cache/pages.json``.

Pages go to the side store as byte planes (``planes``), one object per page
named by the sha256 of those bytes, so a page a fork shares with its parent is
stored once. A cache given as tensors is paged while the snapshot is written:
each job cuts a few pages into a buffer its thread reuses, splits each into
planes, hashes and compresses them while they are in the CPU cache and writes
them past the page cache, so capturing a cache copies none of it whole. The
manifest summary records tokens, pages and bytes (``git pf show`` adds the
pages shared with the parent). Writes no refs.
"""
from __future__ import annotations

import hashlib
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

from ...image import manifest as img
from ...core.errors import UsageError
from . import planes, threads
from .pages import DEFAULT_PAGE_TOKENS, DTYPES, IO_WORKERS, batches
from .table import PATH, PageTable

if TYPE_CHECKING:
    from .paging import Captured, Plan

NAME = "cache"
# zstd level of page objects: the sign-and-exponent planes of fp16/fp32 activations
# gain ~30% from entropy coding, which level 1 gets at the speed of higher levels
# (docs/cache.md).
PAGE_ZSTD_LEVEL = 1
# zstd codes a frame in blocks of at most its window (128 KiB at most), each block with its
# own entropy tables: a block that straddles two planes codes both with one table and loses
# most of the gain. Blocks are made as large as divides a plane, down to 4 KiB.
_MAX_WINDOW_LOG, _MIN_WINDOW_LOG = 17, 12


def page_window_log(page_bytes: int, itemsize: int) -> int | None:
    """The zstd window (log2) whose blocks never straddle two byte planes of a page, or None
    (the default) when no block of 4 KiB or more does (a partial page of odd length)."""
    plane = page_bytes // itemsize
    if itemsize == 1 or plane == 0:
        return None
    log = min(_MAX_WINDOW_LOG, (plane & -plane).bit_length() - 1)
    return log if log >= _MIN_WINDOW_LOG else None


# Pages per job while paging at snapshot time: at most this many bytes (one page at least). It
# bounds the buffer each paging thread keeps, and keeps a job's pages in the CPU cache.
JOB_BYTES = 4 * 1024 * 1024


def _put_page(store, digest: str, data, itemsize: int) -> bool:
    """Store one page object unless the store has it (written past the page cache); whether it was new."""
    if store.has(digest):
        return False
    store.put(data, digest, level=PAGE_ZSTD_LEVEL, direct=True, window_log=page_window_log(len(data), itemsize))
    return True


def store_pages(store, captured: "Captured") -> int:
    """Put every page of a capture into ``store``; returns how many objects were new."""
    itemsize = DTYPES[captured.table.layout.dtype]

    def job(items) -> int:
        return sum(_put_page(store, oid, planes.encode(data, itemsize), itemsize) for oid, data in items)

    unique = {p.sha256: d for p, d in zip(captured.table.pages, captured.data)}
    with ThreadPoolExecutor(IO_WORKERS) as pool:
        return sum(pool.map(job, batches(list(unique.items()))))


def page_into_store(store, plan: "Plan") -> tuple[PageTable, int]:
    """Page the tensors of ``plan`` straight into ``store``: the page table, and how many
    objects were new. Two pages with the same bytes are stored once."""
    from . import tensors

    layout = plan.layout
    pages = tensors.Pages(plan.layers, len(plan.tokens), layout)
    spans = pages.spans
    itemsize = DTYPES[layout.dtype]
    claimed: set[str] = set()
    lock = threading.Lock()

    def job(group: tuple[int, int]) -> tuple[list[str], int]:
        first, last = group
        size = (spans[first][1] - spans[first][0]) * layout.token_bytes  # bytes of each page here
        buf = planes.scratch(size * (last - first), "cut")
        pages.cut_to(first, last, buf)
        digests, new = [], 0
        for i in range(last - first):
            page = planes.encode(buf[i * size : (i + 1) * size], itemsize)
            digest = hashlib.sha256(page).hexdigest()
            with lock:
                mine = digest not in claimed
                claimed.add(digest)
            new += mine and _put_page(store, digest, page, itemsize)
            digests.append(digest)
        return digests, new

    done = list(threads.pool().map(job, plan.groups(JOB_BYTES)))
    return plan.table([d for digests, _ in done for d in digests]), sum(n for _, n in done)


class CacheInput:
    """A KV cache to write into the next snapshot: a capture (bytes already copied out), or
    a plan whose tensors are paged when the snapshot is written (``from_cache``; the tensors
    must not change in between, as files must not change while a snapshot reads them)."""

    name = NAME

    def __init__(self, captured: "Captured | None" = None, plan: "Plan | None" = None):
        if (captured is None) == (plan is None):
            raise ValueError("give a capture or a plan")
        self.captured, self.plan = captured, plan
        self.new_objects = 0

    @classmethod
    def from_cache(cls, cache, token_ids, *, model, adapter=None, page_tokens=DEFAULT_PAGE_TOKENS) -> "CacheInput":
        from .paging import plan

        return cls(plan=plan(cache, token_ids, model=model, adapter=adapter, page_tokens=page_tokens))

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
            raise UsageError(f"'{path}' records no model fingerprint; give --model-fingerprint", param="kv")
        return cls.from_cache(kv.layers, kv.tokens, model=model, adapter=adapter or kv.adapter,
                              page_tokens=page_tokens)

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        if self.plan is not None:
            table, self.new_objects = page_into_store(repo.store, self.plan)
        else:
            self.new_objects = store_pages(repo.store, self.captured)
            table = self.captured.table
        edit.put_file(PATH, table.encode())
        return table.summary()
