"""KV page layout and the page-id hash chain (docs/cache.md, format pf-kv/1).

A page holds ``page_tokens`` consecutive tokens of K and V for every layer;
its bytes are, layer by layer, the K slice then the V slice for its token
range, each C-contiguous in the tensor's dtype, little-endian. A page's id
chains the previous page's id with its token ids, the model fingerprint, the
adapter id and the layout tag, so equal prefixes give equal ids (the scheme
of vLLM's prefix caching). Pure functions on ints, strings and bytes; no
torch, no I/O.
"""
from __future__ import annotations

import hashlib
import re
import struct
from dataclasses import dataclass

from ...core import cores

VERSION = "pf-kv/1"
DEFAULT_PAGE_TOKENS = 16
# threads for CPU-bound page work (hashing, compressing, copying): one per core this process may use
WORKERS = max(2, min(64, cores.usable()))
IO_WORKERS = 2 * WORKERS + 4  # threads for page work that also waits on files and fsync
JOB_PAGES = 8  # pages per thread-pool job: a few MiB of work each, and few jobs to hand out
ID_DOMAIN = b"pf-kv-page/1\x00"
ZERO_ID = "0" * 64
MAX_TOKEN = 2**32 - 1
DTYPES = {  # dtype name -> bytes per element
    "float64": 8, "float32": 4, "float16": 2, "bfloat16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1, "uint8": 1,
}
_TAG = re.compile(r"^pf-kv/1;dtype=([a-z0-9_]+);page=(\d+);k=([0-9x,]+);v=([0-9x,]+)$")


@dataclass(frozen=True)
class Layout:
    """How page bytes are laid out: dtype, page size and per-layer K / V shapes.

    A shape is the tensor's shape without its sequence axis, which is always
    the second to last: ``[batch, heads, head_dim]`` for ``[batch, heads, seq, head_dim]``."""

    dtype: str
    page_tokens: int
    k_shapes: tuple[tuple[int, ...], ...]
    v_shapes: tuple[tuple[int, ...], ...]

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"unsupported KV dtype '{self.dtype}' (choose from {', '.join(DTYPES)})")
        if self.page_tokens < 1:
            raise ValueError("page size must be at least one token")
        if not self.k_shapes or len(self.k_shapes) != len(self.v_shapes):
            raise ValueError("every layer needs one K and one V shape")
        for shape in self.k_shapes + self.v_shapes:
            if len(shape) < 1 or any(d < 1 for d in shape):
                raise ValueError(f"bad K/V shape {list(shape)}")

    @property
    def layers(self) -> int:
        return len(self.k_shapes)

    @property
    def token_bytes(self) -> int:
        """Bytes one token occupies in a page (all layers, K and V)."""
        size = DTYPES[self.dtype]
        return sum(_prod(s) * size for s in self.k_shapes + self.v_shapes)

    def tag(self) -> str:
        """The canonical layout tag; equal tags mean byte-compatible pages."""
        def shapes(ss):
            return ",".join("x".join(str(d) for d in s) for s in ss)
        return f"{VERSION};dtype={self.dtype};page={self.page_tokens};k={shapes(self.k_shapes)};v={shapes(self.v_shapes)}"

    @classmethod
    def parse(cls, tag: str) -> "Layout":
        m = _TAG.match(tag)
        if m is None:
            raise ValueError(f"unknown KV layout tag '{tag[:80]}'")

        def shapes(text):
            return tuple(tuple(int(d) for d in s.split("x")) for s in text.split(","))

        return cls(m.group(1), int(m.group(2)), shapes(m.group(3)), shapes(m.group(4)))


def _prod(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def batches(items: list, size: int = JOB_PAGES) -> list[list]:
    """``items`` in consecutive runs of ``size`` (the last may be shorter)."""
    return [items[i : i + size] for i in range(0, len(items), size)]


def spans(n_tokens: int, page_tokens: int) -> list[tuple[int, int]]:
    """The [start, end) token range of every page; the last may be partial."""
    return [(a, min(a + page_tokens, n_tokens)) for a in range(0, n_tokens, page_tokens)]


def _field(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<I", len(raw)) + raw


def encode_tokens(tokens) -> bytes:
    """Token ids as unsigned 32-bit little-endian integers, refusing ones out of range."""
    try:
        return struct.pack(f"<{len(tokens)}I", *tokens)
    except struct.error:
        bad = next(t for t in tokens if not isinstance(t, int) or not 0 <= t <= MAX_TOKEN)
        raise ValueError(f"token id {bad!r} is not an integer in [0, 2^32)") from None


def page_id(prev: str, tokens, model: str, adapter: str | None, layout_tag: str) -> str:
    """sha256 over the canonical encoding of one chain link (docs/cache.md §Page ids)."""
    h = hashlib.sha256(ID_DOMAIN)
    h.update(bytes.fromhex(prev))
    h.update(_field(model))
    h.update(_field(adapter or ""))
    h.update(_field(layout_tag))
    h.update(struct.pack("<I", len(tokens)))
    h.update(encode_tokens(tokens))
    return h.hexdigest()


def chain(tokens: list[int], model: str, adapter: str | None, layout: Layout) -> list[str]:
    """The page ids of a token sequence, first page first."""
    tag = layout.tag()
    ids, prev = [], ZERO_ID
    for a, b in spans(len(tokens), layout.page_tokens):
        prev = page_id(prev, tokens[a:b], model, adapter, tag)
        ids.append(prev)
    return ids
