"""The KV interchange file: per-layer K/V, token ids and identity in one safetensors file.

Tensors ``layers.<i>.keys`` / ``layers.<i>.values`` and ``token_ids``
(int64); metadata ``format=pf-kv/1``, ``model``, ``adapter``, ``layers``
(docs/cache.md). ``git pf snapshot --kv`` reads it; ``git pf checkout
--layers cache`` writes it. Written atomically. Touches no repository.
"""
from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import InputFormatError, UsageError
from . import pages as pg

FILENAME = "kv.safetensors"


@dataclass(frozen=True)
class KVFile:
    layers: list  # [(K, V)] torch tensors
    tokens: list[int]
    model: str | None
    adapter: str | None


def save(path, cache, token_ids, *, model, adapter: str | None = None) -> Path:
    """Write ``cache`` (DynamicCache, dict or list of (K, V)) and its token ids to ``path``."""
    import torch
    from safetensors.torch import save_file

    from . import tensors
    from .paging import fingerprint, token_list

    tokens = token_list(token_ids)
    layers = tensors.as_layers(cache)
    tensors.layout_of(layers, len(tokens), 1)  # same checks as capture
    data = {"token_ids": torch.tensor(tokens, dtype=torch.int64)}
    for i, (k, v) in enumerate(layers):
        data[f"layers.{i}.keys"] = k.detach().cpu().contiguous()
        data[f"layers.{i}.values"] = v.detach().cpu().contiguous()
    meta = {"format": pg.VERSION, "model": fingerprint(model), "adapter": adapter or "", "layers": str(len(layers))}
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.")
    os.close(fd)
    try:
        save_file(data, tmp, metadata=meta)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


MAX_HEADER = 100 << 20


def _header(path: Path) -> dict:
    """The safetensors JSON header, read without torch (so a wrong file fails fast)."""
    with open(path, "rb") as f:
        head = f.read(8)
        size = int.from_bytes(head, "little") if len(head) == 8 else 0
        if not 2 <= size <= MAX_HEADER:
            raise ValueError("no safetensors header")
        doc = json.loads(f.read(size))
    if not isinstance(doc, dict):
        raise ValueError("the header is not a JSON object")
    return doc


def load(path) -> KVFile:
    """Read an interchange file; one-line errors for anything malformed."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"'{path}' does not exist or is not a file", param="kv")
    try:
        doc = _header(path)
    except (ValueError, OSError) as e:
        raise InputFormatError(f"'{path}' is not a readable safetensors file ({e})", param="kv") from None
    meta = doc.get("__metadata__") or {}
    if meta.get("format") != pg.VERSION:
        raise InputFormatError(f"'{path}' is not a {pg.VERSION} KV file (format {meta.get('format')!r})", param="kv")
    n = int(meta["layers"]) if str(meta.get("layers", "")).isdigit() else 0
    want = {"token_ids"} | {f"layers.{i}.{kv}" for i in range(n) for kv in ("keys", "values")}
    if n < 1 or set(doc) - {"__metadata__"} != want:
        raise InputFormatError(f"'{path}' does not hold token_ids and {n} layers of keys/values", param="kv")
    return _read_tensors(path, n, meta)


def _read_tensors(path: Path, n: int, meta: dict) -> KVFile:
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            tokens = f.get_tensor("token_ids").tolist()
            layers = [(f.get_tensor(f"layers.{i}.keys"), f.get_tensor(f"layers.{i}.values")) for i in range(n)]
    except (SafetensorError, ValueError, OSError) as e:
        raise InputFormatError(f"'{path}' is not a readable safetensors file ({str(e).splitlines()[0]})", param="kv") from None
    return KVFile(layers, tokens, meta.get("model") or None, meta.get("adapter") or None)
