"""Pointer blobs: the small git blob that stands in the tree for a large file.

git-lfs style ``key value`` lines, ``version`` first, the other keys sorted,
ASCII, newline-terminated, always under 1 KiB (docs/sidestore.md):

    version https://git-pf.dev/spec/pointer/v1
    chunks sha256:<chunk-index oid>     (only when the content has >1 chunk)
    oid sha256:<sha256 of the whole content>
    size <bytes>

A pointer whose ``size`` is over ``pf.maxObjectSize`` (``limits``) is refused
when decoded. Pure encode/decode; no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..core import limits
from .large import LargeObject

VERSION = "https://git-pf.dev/spec/pointer/v1"
MAX_POINTER_SIZE = 1024
_HEX64 = re.compile(r"^sha256:([0-9a-f]{64})$")


@dataclass(frozen=True)
class Pointer:
    oid: str
    size: int
    chunks: str | None = None  # oid of the chunk-index object, if any

    @classmethod
    def of(cls, obj: LargeObject) -> "Pointer":
        return cls(obj.oid, obj.size, obj.index_oid)

    def encode(self) -> bytes:
        lines = [f"version {VERSION}"]
        if self.chunks is not None:
            lines.append(f"chunks sha256:{self.chunks}")
        lines.append(f"oid sha256:{self.oid}")
        lines.append(f"size {self.size}")
        return ("\n".join(lines) + "\n").encode("ascii")

    def object_ids(self) -> list[str]:
        """Every side-store object this pointer needs directly (chunks via the index)."""
        return [self.oid] if self.chunks is None else [self.chunks]


def looks_like_pointer(data: bytes) -> bool:
    return len(data) < MAX_POINTER_SIZE and data.startswith(f"version {VERSION}\n".encode())


def decode(data: bytes) -> Pointer:
    """Parse a pointer blob; raises ValueError when it is not exactly canonical or claims a
    size over ``pf.maxObjectSize``."""
    if not looks_like_pointer(data):
        raise ValueError("not a git-pf pointer")
    fields: dict[str, str] = {}
    for line in data.decode("ascii").splitlines()[1:]:
        key, _, value = line.partition(" ")
        fields[key] = value
    oid = _HEX64.match(fields.get("oid", ""))
    if oid is None or not fields.get("size", "").isdigit():
        raise ValueError("pointer lacks a valid oid or size")
    chunks = None
    if "chunks" in fields:
        m = _HEX64.match(fields["chunks"])
        if m is None:
            raise ValueError("pointer has a malformed chunks line")
        chunks = m.group(1)
    ptr = Pointer(oid.group(1), int(fields["size"]), chunks)
    if ptr.encode() != data:
        raise ValueError("pointer is not in canonical form")
    limit = limits.active().max_object
    if ptr.size > limit:
        raise ValueError(f"pointer claims {ptr.size} bytes, over pf.maxObjectSize ({limit})")
    return ptr
