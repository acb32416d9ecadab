"""Torch side of the KV layer: per-layer K/V tensors <-> page bytes.

Reads K/V out of a transformers ``DynamicCache`` (``cache.layers[i].keys /
.values``), a dict or a list of per-layer (K, V) pairs; cuts them into page
bytes (``Pages.cut_to`` a few pages into any buffer, ``Cut`` every page into one)
and writes page bytes back into tensors (``Canvas``),
with numpy copies that release the GIL so worker threads share the work. The
sequence axis is the second to last. Knows nothing of repositories or the
side store.
"""
from __future__ import annotations

import itertools
import math
import sys

import numpy as np
import torch

from ...core.errors import UsageError
from . import pages as pg, prefault

KV = list[tuple[torch.Tensor, torch.Tensor]]
MAP_IN_BYTES = 32 << 20  # parts of a restore buffer mapped in by one job


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise UsageError(f"KV dtype '{name}' is not supported by this torch")
    return dtype


def as_layers(cache) -> KV:
    """Per-layer (K, V) tensors of a DynamicCache, a {layer: (K, V)} dict or a list of pairs."""
    if hasattr(cache, "layers") and not isinstance(cache, (dict, list, tuple)):
        out = []
        for i, layer in enumerate(cache.layers):
            if getattr(layer, "is_sliding", False):
                raise UsageError(f"KV layer {i} is a sliding-window layer; only full-attention caches can be paged")
            if getattr(layer, "keys", None) is None or getattr(layer, "values", None) is None:
                raise UsageError(f"KV layer {i} of the cache is empty")
            out.append((layer.keys, layer.values))
        return out
    if isinstance(cache, dict):
        try:
            items = [cache[k] for k in sorted(cache)]
        except TypeError:
            raise UsageError("a KV dict must be keyed by layer index") from None
    elif isinstance(cache, (list, tuple)):
        items = list(cache)
    else:
        raise UsageError(f"cannot read K/V from a {type(cache).__name__} (give a DynamicCache, dict or list)")
    out = []
    for i, pair in enumerate(items):
        if not isinstance(pair, (list, tuple)) or len(pair) != 2 or not all(isinstance(t, torch.Tensor) for t in pair):
            raise UsageError(f"KV layer {i} is not a (K, V) pair of tensors")
        out.append((pair[0], pair[1]))
    return out


def layout_of(layers: KV, n_tokens: int, page_tokens: int) -> pg.Layout:
    """The layout of ``layers``, refusing caches that do not match the token count."""
    if sys.byteorder != "little":
        raise UsageError("KV pages are little-endian; this machine is big-endian")
    if not layers:
        raise UsageError("the KV cache has no layers")
    dtype = layers[0][0].dtype
    k_shapes, v_shapes = [], []
    for i, (k, v) in enumerate(layers):
        for name, t in (("K", k), ("V", v)):
            if t.dtype != dtype:
                raise UsageError(f"KV layer {i} {name} is {dtype_name(t.dtype)}, layer 0 is {dtype_name(dtype)}")
            if t.dim() < 2 or t.shape[-2] != n_tokens:
                raise UsageError(f"KV layer {i} {name} has shape {list(t.shape)}: its sequence axis (-2) "
                                 f"must hold the {n_tokens} given token ids")
            if t.dim() == 4 and t.shape[0] != 1:
                raise UsageError(f"KV layer {i} {name} has batch {t.shape[0]}; one sequence per cache (batch 1)")
        k_shapes.append(_no_seq(k.shape))
        v_shapes.append(_no_seq(v.shape))
    try:
        return pg.Layout(dtype_name(dtype), page_tokens, tuple(k_shapes), tuple(v_shapes))
    except ValueError as e:
        raise UsageError(str(e)) from None


def _no_seq(shape) -> tuple[int, ...]:
    return tuple(shape[:-2]) + (shape[-1],)


def _with_seq(shape: tuple[int, ...], n: int) -> tuple[int, ...]:
    return shape[:-1] + (n,) + shape[-1:]


def _bytes_of(t: torch.Tensor) -> np.ndarray:
    """``t`` as a numpy uint8 array of shape [..., seq, row bytes] (a view of a CPU tensor)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.stride(-1) != 1:
        t = t.contiguous()
    return t.view(torch.uint8).numpy()


class Pages:
    """The pages of a cache's K/V tensors, for copying groups of them out (``cut_to``).

    Every tensor is viewed once (no copy) as ``[full pages, ..., page tokens,
    row bytes]``, so a group of full pages is one strided copy per tensor with
    nothing worked out per call; the partial last page is sliced as it comes.
    The copies release the GIL, so groups can be cut from several threads at
    once."""

    def __init__(self, layers: KV, n_tokens: int, layout: pg.Layout):
        self.layout = layout
        self.spans = pg.spans(n_tokens, layout.page_tokens)
        self._sources = sources(layers)
        self._full = n_tokens // layout.page_tokens
        self._views = [_paged(src, self._full, layout.page_tokens) for src in self._sources]

    def cut_to(self, first: int, last: int, dest: np.ndarray) -> None:
        """Copy pages [first, last), all of the same size, into the flat uint8 array ``dest``
        (their bytes back to back, in page order)."""
        a, b = self.spans[first]
        count, size = last - first, b - a
        rows = dest[: count * size * self.layout.token_bytes].reshape(count, size * self.layout.token_bytes)
        offset = 0
        for src, view in zip(self._sources, self._views):
            if view is not None and last <= self._full:
                part = view[first:last]
            else:
                part = _as_pages(src[..., a : a + count * size, :], count, size)
            nbytes = math.prod(part.shape[1:])
            np.copyto(rows[:, offset : offset + nbytes].reshape(part.shape), part)
            offset += nbytes


def _paged(src: np.ndarray, full: int, page_tokens: int) -> np.ndarray | None:
    """``src`` ([..., seq, row bytes]) as a view ``[full pages, ..., page tokens, row bytes]`` of
    its full pages; None where its strides allow no such view."""
    view = _as_pages(src[..., : full * page_tokens, :], full, page_tokens)
    return view if full and np.may_share_memory(view, src) else None  # a reshape that copied: none


def _as_pages(part: np.ndarray, pages: int, page_tokens: int) -> np.ndarray:
    """``part`` ([..., pages * page_tokens, row]) as ``[pages, ..., page_tokens, row]``."""
    return np.moveaxis(part.reshape(part.shape[:-2] + (pages, page_tokens, part.shape[-1])), -3, 0)


class Cut:
    """The pages of a cache, cut into one buffer in page order.

    Page i (tokens [a, b)) is ``view(i)``, bytes ``[a, b) * token_bytes`` of
    the buffer. ``cut(first, last)`` copies pages [first, last), all of the
    same size (``Pages.cut_to``), from any thread."""

    def __init__(self, layers: KV, n_tokens: int, layout: pg.Layout):
        self.layout = layout
        self._pages = Pages(layers, n_tokens, layout)
        self.spans = self._pages.spans
        self.buffer = torch.empty(n_tokens * layout.token_bytes, dtype=torch.uint8)
        self._flat = self.buffer.numpy()

    def view(self, i: int) -> memoryview:
        a, b = self.spans[i]
        return memoryview(self._flat[a * self.layout.token_bytes : b * self.layout.token_bytes])

    def cut(self, first: int, last: int) -> None:
        a = self.spans[first][0]
        b = a + (last - first) * (self.spans[first][1] - a)
        rows = self._flat[a * self.layout.token_bytes : b * self.layout.token_bytes]
        prefault.map_in(rows.ctypes.data, rows.nbytes)
        self._pages.cut_to(first, last, rows)


def sources(layers: KV) -> list[np.ndarray]:
    """Every K and V tensor of ``layers`` as bytes (views, no copy), in page order."""
    return [_bytes_of(t) for pair in layers for t in pair]


class Canvas:
    """Empty K/V tensors for ``n_tokens`` tokens in one buffer, filled page by page.

    Every tensor is a contiguous view of one flat buffer, in page order (layer
    0 K, layer 0 V, layer 1 K, ...). Consecutive tensors of equal shape form a
    run that looks, through numpy, like ``[rows, n_tokens, row bytes]``; a
    page holds each run's tokens [a, b) as ``[rows, b - a, row bytes]``, so a
    page lands with one strided copy per run (one in all for the usual
    layout of equal K and V shapes). The copies release the GIL, so pages can
    be written from several threads at once."""

    def __init__(self, layout: pg.Layout, n_tokens: int):
        self.layout, self.n_tokens = layout, n_tokens
        self.buffer = torch.empty(n_tokens * layout.token_bytes, dtype=torch.uint8)
        flat, itemsize = self.buffer.numpy(), pg.DTYPES[layout.dtype]
        shapes = [s for pair in zip(layout.k_shapes, layout.v_shapes) for s in pair]
        self._runs = []  # (destination [rows, n_tokens, row], bytes per token of the runs before it)
        offset = per_token = 0
        for shape, same in itertools.groupby(shapes):
            rows, row = len(list(same)) * math.prod(shape[:-1]), shape[-1] * itemsize
            self._runs.append((flat[offset : offset + rows * n_tokens * row].reshape(rows, n_tokens, row), per_token))
            offset += rows * n_tokens * row
            per_token += rows * row
        self._shapes = shapes

    def parts(self, size: int = MAP_IN_BYTES) -> list[tuple[int, int]]:
        """The buffer as (offset, bytes) parts for ``map_in``."""
        total = self.buffer.numel()
        return [(off, min(size, total - off)) for off in range(0, total, size)]

    def map_in(self, part: tuple[int, int]) -> None:
        """Map in the memory of one part before pages land in it (``prefault``)."""
        prefault.map_in(self.buffer.data_ptr() + part[0], part[1])

    def fill(self, a: int, b: int, data) -> None:
        """Copy the bytes of the page holding tokens [a, b) into place; of a page that runs past
        the canvas's tokens, the tokens before its end."""
        src, keep = np.frombuffer(data, dtype=np.uint8), min(b, self.n_tokens) - a
        for dst, before in self._runs:
            rows, row = dst.shape[0], dst.shape[2]
            start = before * (b - a)
            page = src[start : start + rows * (b - a) * row].reshape(rows, b - a, row)
            np.copyto(dst[:, a : a + keep, :], page[:, :keep, :])

    def layers(self, device=None) -> KV:
        """The per-layer (K, V) tensors (views of the buffer; copies on ``device`` when given)."""
        dtype = torch_dtype(self.layout.dtype)
        out, offset = [], 0
        for shape in self._shapes:
            nbytes = math.prod(shape) * self.n_tokens * pg.DTYPES[self.layout.dtype]
            t = self.buffer[offset : offset + nbytes].view(dtype).view(_with_seq(shape, self.n_tokens))
            out.append(t.to(device) if device is not None else t)
            offset += nbytes
        return list(zip(out[0::2], out[1::2]))


def to_dynamic_cache(layers: KV):
    """A DynamicCache holding ``layers`` as they are (no copy).

    The constructor sets every layer up from empty slices (dtype, device,
    initialised); the full tensors then become its ``keys`` / ``values``."""
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in layers])
    for layer, (k, v) in zip(cache.layers, layers):
        layer.keys, layer.values = k, v
    return cache
