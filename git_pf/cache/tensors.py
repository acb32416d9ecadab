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
    from transformers import DynamicCache

    return DynamicCache(ddp_cache_data=layers)
