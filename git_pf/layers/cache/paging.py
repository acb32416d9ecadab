"""Capturing a KV cache as pages: ``capture``, ``fingerprint`` and ``compare``.

``capture`` cuts the cache into pages, hashes every page as stored and builds
the page table; it writes nothing (``layer.CacheInput`` stores the pages).
Does not touch repositories.
"""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import torch

from ...core.errors import UsageError
from . import pages as pg, planes, tensors
from .table import Page, PageTable

DEFAULT_PAGE_TOKENS, WORKERS = pg.DEFAULT_PAGE_TOKENS, pg.WORKERS


@dataclass(frozen=True)
class Captured:
    """A cache cut into pages: the table and every page's bytes (in table order; the
    bytes of docs/cache.md §2, which the side store holds as byte planes)."""

    table: PageTable
    data: tuple[memoryview, ...]


def fingerprint(model) -> str:
    """A model's identity: a string as given (``name@revision``), or ``sha256:`` of a module's weights.

    The weight hash covers every state-dict entry in name order: name, dtype,
    shape and the raw bytes."""
    if isinstance(model, str):
        if not model.strip():
            raise UsageError("the model fingerprint must not be empty")
        return model
    state = getattr(model, "state_dict", None)
    if state is None:
        raise UsageError(f"model must be a fingerprint string or a torch module, not {type(model).__name__}")
    h = hashlib.sha256(b"pf-weights/1\x00")
    for name, t in sorted(state().items()):
        t = t.detach().cpu().contiguous()
        h.update(f"{name}\x00{tensors.dtype_name(t.dtype)}\x00{list(t.shape)}\x00".encode())
        h.update(memoryview(t.view(-1).view(torch.uint8).numpy()))
    return "sha256:" + h.hexdigest()


def token_list(token_ids) -> list[int]:
    """Token ids (a list, a tensor, or a batch of one) as a checked list of ints."""
    if hasattr(token_ids, "tolist"):
        token_ids = token_ids.tolist()
    if token_ids and isinstance(token_ids[0], list):
        if len(token_ids) != 1:
            raise UsageError("token ids hold more than one sequence; a cache holds one (batch 1)")
        token_ids = token_ids[0]
    out = [int(t) for t in token_ids]
    try:
        pg.encode_tokens(out)
    except ValueError as e:
        raise UsageError(str(e)) from None
    return out


@dataclass(frozen=True)
class Plan:
    """A cache checked and laid out for paging, its tensors referenced (not copied): what
    ``capture`` copies at once and ``layer.CacheInput`` pages while the snapshot is written."""

    layers: tensors.KV
    tokens: tuple[int, ...]
    layout: pg.Layout
    model: str
    adapter: str | None
    ids: tuple[str, ...]

    def groups(self, max_bytes: int | None = None) -> list[tuple[int, int]]:
        """Page ranges [first, last) for one job each: up to JOB_PAGES full pages (fewer when
        ``max_bytes`` caps a job's bytes; at least one), the partial last page alone."""
        per_job = pg.JOB_PAGES
        if max_bytes is not None:
            per_job = max(1, min(per_job, max_bytes // (self.layout.page_tokens * self.layout.token_bytes)))
        return _groups(len(self.tokens), self.layout.page_tokens, per_job)

    def table(self, digests: list[str]) -> PageTable:
        """The page table once every page's bytes are hashed (``digests`` in page order)."""
        spans = pg.spans(len(self.tokens), self.layout.page_tokens)
        pages = tuple(Page(pid, digest, (b - a) * self.layout.token_bytes)
                      for pid, digest, (a, b) in zip(self.ids, digests, spans))
        return PageTable(self.layout, self.model, self.adapter, self.tokens, pages)


def plan(cache, token_ids, *, model, adapter: str | None = None, page_tokens: int = DEFAULT_PAGE_TOKENS) -> Plan:
    """Check a DynamicCache (or a dict / list of per-layer (K, V) tensors) against
    ``token_ids`` and work out its layout and page ids; copies nothing."""
    tokens = token_list(token_ids)
    layers = tensors.as_layers(cache)
    layout = tensors.layout_of(layers, len(tokens), page_tokens)
    model_id = fingerprint(model)
    return Plan(layers, tuple(tokens), layout, model_id, adapter, tuple(pg.chain(tokens, model_id, adapter, layout)))


def capture(cache, token_ids, *, model, adapter: str | None = None,
            page_tokens: int = DEFAULT_PAGE_TOKENS) -> Captured:
    """Page a DynamicCache (or a dict / list of per-layer (K, V) tensors) for ``token_ids``.

    ``model`` is a fingerprint string (weights sha256 or ``name@revision``)
    or the torch module itself; ``adapter`` names the adapter in use, if any.
    The page bytes are copied out of the cache at once."""
    p = plan(cache, token_ids, model=model, adapter=adapter, page_tokens=page_tokens)
    cut = tensors.Cut(p.layers, len(p.tokens), p.layout)
    data = [cut.view(i) for i in range(len(p.ids))]
    itemsize = pg.DTYPES[p.layout.dtype]

    def group(span: tuple[int, int]) -> list[str]:
        cut.cut(*span)  # then hash the group's pages (as stored) while their bytes are still in cache
        return [hashlib.sha256(planes.encode(data[i], itemsize)).hexdigest() for i in range(*span)]

    with ThreadPoolExecutor(WORKERS) as pool:
        digests = [d for part in pool.map(group, p.groups()) for d in part]
    return Captured(p.table(digests), tuple(data))


def _groups(n_tokens: int, page_tokens: int, per_job: int = pg.JOB_PAGES) -> list[tuple[int, int]]:
    """Page ranges [first, last) cut and hashed as one job: ``per_job`` full pages, the partial last page alone."""
    full, total = n_tokens // page_tokens, -(-n_tokens // page_tokens)
    out = [(i, min(i + per_job, full)) for i in range(0, full, per_job)]
    return out + [(full, total)] if total > full else out


def compare(a: PageTable, b: PageTable) -> dict:
    """How two page tables differ: same-token pages whose bytes differ, and where tokens part.

    A cache rebuilt by re-prefilling has the same page ids (same tokens) but
    different bytes; this is how that shows. ``pages_with_different_bytes`` is None
    when the tables store their pages in different encodings (``PageTable.encoding``)."""
    same_tokens = 0
    for pa, pb in zip(a.pages, b.pages):
        if pa.id != pb.id:
            break
        same_tokens += 1
    differing = None  # tables of two versions hash differently encoded objects: not comparable by hash
    if a.encoding == b.encoding:
        differing = [i for i in range(same_tokens) if a.pages[i].sha256 != b.pages[i].sha256]
    return {
        "identical": a.to_json() == b.to_json(),
        "common_pages": same_tokens,
        "pages_with_different_bytes": differing,
        "layout_equal": a.layout == b.layout,
    }
