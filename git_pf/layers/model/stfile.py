"""The safetensors file format, read and written by hand (no torch, no safetensors).

A safetensors file is an 8-byte little-endian header length N, N bytes of
JSON header (``__metadata__`` plus ``name -> {dtype, shape, data_offsets}``,
padded with spaces to a multiple of 8) and one data buffer that the tensors
tile exactly, in header order. ``parse`` validates a header against the file
size and returns the tensors in data order; ``encode_header`` writes the
header the way the safetensors library does (so files it wrote come back
byte for byte). Pure functions on bytes; no I/O, no side store.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass

# Bytes per element of every dtype we store (sub-byte types are refused).
DTYPE_SIZES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8, "C64": 8,
}
MAX_HEADER = 100_000_000  # the safetensors library's own limit
METADATA_KEY = "__metadata__"


@dataclass(frozen=True)
class Entry:
    """One tensor as the header describes it; ``begin``/``end`` are offsets in the data buffer."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def size(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class Header:
    metadata: dict[str, str] | None
    entries: tuple[Entry, ...]  # in data order
    raw: bytes  # the header bytes as found (without the length prefix)

    @property
    def data_start(self) -> int:
        return 8 + len(self.raw)

    @property
    def canonical(self) -> bool:
        """True when ``encode_header`` reproduces the header byte for byte."""
        return encode_header(self.metadata, self.entries) == self.raw


def nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return math.prod(shape) * DTYPE_SIZES[dtype]


def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key '{k}' in header")
        out[k] = v
    return out


def _entry(name: str, info) -> Entry:
    if not isinstance(info, dict) or set(info) != {"dtype", "shape", "data_offsets"}:
        raise ValueError(f"tensor '{name}': header entry needs exactly dtype, shape, data_offsets")
    dtype, shape, offsets = info["dtype"], info["shape"], info["data_offsets"]
    if dtype not in DTYPE_SIZES:
        raise ValueError(f"tensor '{name}': unsupported dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
        raise ValueError(f"tensor '{name}': shape must be a list of non-negative integers")
    if (not isinstance(offsets, list) or len(offsets) != 2
            or not all(type(o) is int and o >= 0 for o in offsets) or offsets[0] > offsets[1]):
        raise ValueError(f"tensor '{name}': bad data_offsets")
    entry = Entry(name, dtype, tuple(shape), offsets[0], offsets[1])
    if entry.size != nbytes(dtype, entry.shape):
        raise ValueError(f"tensor '{name}': {entry.size} bytes do not fit dtype {dtype} shape {list(shape)}")
    return entry


def _metadata(value) -> dict[str, str]:
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError("__metadata__ must map strings to strings")
    return value


def parse(head: bytes, file_size: int) -> Header:
    """Validate the header at the start of a file of ``file_size`` bytes.

    ``head`` holds at least the first ``8 + N`` bytes (more is fine). Raises
    ValueError naming what is wrong."""
    if file_size < 8 or len(head) < 8:
        raise ValueError("file is shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", head[:8])
    if n > MAX_HEADER or 8 + n > file_size:
        raise ValueError(f"header length {n} does not fit in the file")
    raw = bytes(head[8 : 8 + n])
    if len(raw) != n:
        raise ValueError("header is truncated")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ValueError(f"header is not valid JSON ({e})") from None
    if not isinstance(doc, dict):
        raise ValueError("header is not a JSON object")
    metadata = _metadata(doc.pop(METADATA_KEY)) if METADATA_KEY in doc else None
    entries = sorted((_entry(k, v) for k, v in doc.items()), key=lambda e: (e.begin, e.end))
    pos = 0
    for e in entries:
        if e.begin != pos:
            raise ValueError(f"tensor '{e.name}': data does not tile the buffer (gap or overlap at byte {pos})")
        pos = e.end
    if pos != file_size - 8 - n:
        raise ValueError(f"data buffer holds {file_size - 8 - n} bytes but the tensors need {pos}")
    return Header(metadata, tuple(entries), raw)


def _dumps(value) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def encode_header(metadata: dict[str, str] | None, entries) -> bytes:
    """The header the safetensors library writes for ``entries`` in this order: compact
    JSON, ``__metadata__`` first with sorted keys, padded with spaces to 8 bytes."""
    parts = [] if metadata is None else [f"{_dumps(METADATA_KEY)}:{_dumps(dict(sorted(metadata.items())))}"]
    for e in entries:
        info = f'{{"dtype":{_dumps(e.dtype)},"shape":{_dumps(list(e.shape))},"data_offsets":[{e.begin},{e.end}]}}'
        parts.append(f"{_dumps(e.name)}:{info}")
    raw = ("{" + ",".join(parts) + "}").encode("utf-8")
    return raw + b" " * (-len(raw) % 8)


def layout(items) -> list[Entry]:
    """Entries for ``(name, dtype, shape)`` items placed back to back in the given order."""
    out, pos = [], 0
    for name, dtype, shape in items:
        size = nbytes(dtype, tuple(shape))
        out.append(Entry(name, dtype, tuple(shape), pos, pos + size))
        pos += size
    return out


def length_prefix(header: bytes) -> bytes:
    return struct.pack("<Q", len(header))
