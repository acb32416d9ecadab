"""Torch side of the KV layer: per-layer K/V tensors <-> page bytes.

Reads K/V out of a transformers ``DynamicCache`` (``cache.layers[i].keys /
.values``), a dict or a list of per-layer (K, V) pairs; cuts them into page
buffers and writes page buffers back into tensors. The sequence axis is the
second to last. Knows nothing of repositories or the side store.
"""
from __future__ import annotations

import sys
import warnings

import torch

from ..errors import UsageError
from . import pages as pg

KV = list[tuple[torch.Tensor, torch.Tensor]]


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


def page_buffer(layers: KV, a: int, b: int, layout: pg.Layout) -> memoryview:
    """The bytes of the page holding tokens [a, b)."""
    buf = torch.empty((b - a) * layout.token_bytes, dtype=torch.uint8)
    off = 0
    for k, v in layers:
        for t in (k, v):
            part = t[..., a:b, :]
            nbytes = part.numel() * part.element_size()
            buf[off : off + nbytes].view(t.dtype).view(part.shape).copy_(part)
            off += nbytes
    return memoryview(buf.numpy())


def _full_page_views(t: torch.Tensor, full: int, page_tokens: int) -> torch.Tensor:
    """The first ``full * page_tokens`` tokens of ``t`` as [page, ..., token, dim] (a view)."""
    pre, dim = tuple(t.shape[:-2]), t.shape[-1]
    return t[..., : full * page_tokens, :].reshape(pre + (full, page_tokens, dim)).movedim(-3, 0)


def _chunks(big: torch.Tensor, layers: KV, full: int, layout: pg.Layout):
    """Pairs (tensor's full pages as a view, the same bytes' place in the page buffer)."""
    page_bytes = layout.page_tokens * layout.token_bytes
    rows = big[: full * page_bytes].view(full, page_bytes)
    off = 0
    for k, v in layers:
        for t in (k, v):
            pages = _full_page_views(t, full, layout.page_tokens)
            nbytes = pages[0].numel() * t.element_size()
            yield pages, rows[:, off : off + nbytes].view(t.dtype).view(pages.shape)
            off += nbytes


def all_pages(layers: KV, n_tokens: int, layout: pg.Layout) -> list[memoryview]:
    """Every page's bytes, the full pages cut with one strided copy per tensor."""
    spans = pg.spans(n_tokens, layout.page_tokens)
    full = n_tokens // layout.page_tokens
    page_bytes = layout.page_tokens * layout.token_bytes
    big = torch.empty(full * page_bytes, dtype=torch.uint8)
    if full:
        for src, dst in _chunks(big, layers, full, layout):
            dst.copy_(src)
    view = memoryview(big.numpy())
    out = [view[i * page_bytes : (i + 1) * page_bytes] for i in range(full)]
    if len(spans) > full:
        out.append(page_buffer(layers, spans[-1][0], spans[-1][1], layout))
    return out


def empty_layers(layout: pg.Layout, n_tokens: int, device=None) -> KV:
    dtype = torch_dtype(layout.dtype)
    return [(torch.empty(_with_seq(k, n_tokens), dtype=dtype, device=device),
             torch.empty(_with_seq(v, n_tokens), dtype=dtype, device=device))
            for k, v in zip(layout.k_shapes, layout.v_shapes)]


def fill_page(layers: KV, a: int, b: int, data, layout: pg.Layout) -> None:
    """Copy one page's bytes into tokens [a, b) of ``layers``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffer: we only read from it
        src = torch.frombuffer(data, dtype=torch.uint8) if len(data) else torch.empty(0, dtype=torch.uint8)
    off = 0
    for k, v in layers:
        for t in (k, v):
            dst = t[..., a:b, :]
            nbytes = dst.numel() * t.element_size()
            dst.copy_(src[off : off + nbytes].view(t.dtype).view(dst.shape))
            off += nbytes


def to_dynamic_cache(layers: KV):
    """A DynamicCache holding ``layers`` as they are (no copy).

    The constructor sets every layer up from empty slices (dtype, device,
    initialised); the full tensors then become its ``keys`` / ``values``."""
    from transformers import DynamicCache

    cache = DynamicCache(ddp_cache_data=[(k[..., :0, :], v[..., :0, :]) for k, v in layers])
    for layer, (k, v) in zip(cache.layers, layers):
        layer.keys, layer.values = k, v
    return cache
