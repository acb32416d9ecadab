"""Side-store tensors <-> torch tensors: the one place the model layer turns bytes into torch.

Imported only by the numeric merge paths (never by capture, restore or any
core command). Byte order is little-endian, as in safetensors.
"""
from __future__ import annotations

import torch

from ...store.sidestore import SideStore
from .store import TensorIndex, iter_tensors

DTYPES: dict[str, torch.dtype] = {
    "BOOL": torch.bool, "U8": torch.uint8, "I8": torch.int8, "I16": torch.int16, "U16": torch.uint16,
    "F16": torch.float16, "BF16": torch.bfloat16, "I32": torch.int32, "U32": torch.uint32,
    "F32": torch.float32, "I64": torch.int64, "U64": torch.uint64, "F64": torch.float64,
    "C64": torch.complex64, "F8_E5M2": torch.float8_e5m2, "F8_E4M3": torch.float8_e4m3fn,
}
if hasattr(torch, "float8_e8m0fnu"):
    DTYPES["F8_E8M0"] = torch.float8_e8m0fnu
NAMES = {v: k for k, v in DTYPES.items()}


def from_bytes(data: bytes, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    if not data:
        return torch.empty(shape, dtype=DTYPES[dtype])
    return torch.frombuffer(bytearray(data), dtype=DTYPES[dtype]).reshape(shape)


def to_bytes(t: torch.Tensor) -> bytes:
    flat = t.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def load(store: SideStore, index: TensorIndex) -> dict[str, torch.Tensor]:
    """Every tensor of a stored safetensors file, by name, in data order."""
    return {e.name: from_bytes(data, e.dtype, e.shape) for e, data in iter_tensors(store, index)}


def items(tensors: dict[str, torch.Tensor]) -> list[tuple[str, str, tuple[int, ...], bytes]]:
    """``(name, dtype, shape, bytes)`` for ``store.store_tensors``, names sorted (canonical order)."""
    out = []
    for name in sorted(tensors):
        t = tensors[name]
        if t.dtype not in NAMES:
            raise ValueError(f"tensor '{name}': dtype {t.dtype} cannot be stored in safetensors")
        out.append((name, NAMES[t.dtype], tuple(t.shape), to_bytes(t)))
    return out
