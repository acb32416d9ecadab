"""Safetensors files <-> the side store, one object per tensor (docs/model.md).

``capture_file`` stores every tensor's exact bytes as one side-store object
(named by their sha256, so a tensor unchanged between images is stored once)
and returns the canonical ``TensorIndex`` that goes into the image tree;
``write_file`` rebuilds the file byte for byte from the index (every tensor
verified on read, the header checked against the index); ``store_tensors``
stores tensors produced in memory (a merge result). Works on raw bytes only:
never imports torch. Knows nothing of image trees or refs.
"""
from __future__ import annotations

import hashlib
import mmap
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

from ...core import canonjson, cores
from ...core.errors import DataError, UsageError
from ...store.frames import OID_RE
from ...store.sidestore import SideStore
from . import stfile

INDEX_VERSION = 1
# Threads: hashing and zstd release the GIL, and each object's fsync waits on the disk,
# so more threads than cores overlap those waits.
_WORKERS = max(4, min(16, 4 * cores.usable()))
_WINDOW_BYTES = 256 << 20  # tensor bytes read ahead while restoring (at least one tensor)


@dataclass(frozen=True)
class IndexEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    size: int
    sha256: str

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "size": self.size,
                "sha256": self.sha256}


@dataclass(frozen=True)
class TensorIndex:
    """A safetensors file as stored: its tensors in data order, each a side-store object."""

    metadata: dict[str, str] | None
    tensors: tuple[IndexEntry, ...]
    size: int  # bytes of the whole file
    sha256: str  # of the whole file
    header: str | None = None  # the verbatim header, only when it is not the canonical one

    def to_json(self) -> dict:
        doc = {"version": INDEX_VERSION, "metadata": self.metadata, "size": self.size, "sha256": self.sha256,
               "tensors": [t.to_json() for t in self.tensors]}
        if self.header is not None:
            doc["header"] = self.header
        return doc

    def encode(self) -> bytes:
        return canonjson.encode(self.to_json())

    @classmethod
    def decode(cls, data: bytes, where: str = "tensors.json") -> "TensorIndex":
        try:
            doc = canonjson.loads(data)
            if doc.get("version") != INDEX_VERSION:
                raise ValueError(f"unsupported version {doc.get('version')!r}")
            tensors = tuple(IndexEntry(t["name"], t["dtype"], tuple(t["shape"]), int(t["size"]), t["sha256"])
                            for t in doc["tensors"])
            if not all(OID_RE.match(t.sha256) and t.dtype in stfile.DTYPE_SIZES for t in tensors):
                raise ValueError("bad tensor entry")
            return cls(doc["metadata"], tensors, int(doc["size"]), doc["sha256"], doc.get("header"))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise DataError(f"{where} is damaged ({e})") from None

    def object_ids(self) -> list[str]:
        return list(dict.fromkeys(t.sha256 for t in self.tensors))

    @property
    def parameters(self) -> int:
        total = 0
        for t in self.tensors:
            n = 1
            for d in t.shape:
                n *= d
            total += n
        return total

    def header_bytes(self) -> bytes:
        if self.header is not None:
            return self.header.encode("utf-8")
        return stfile.encode_header(self.metadata, stfile.layout((t.name, t.dtype, t.shape) for t in self.tensors))


# -- reading a file the user gave -------------------------------------------
def read_header(path: Path, flag: str) -> stfile.Header:
    """Validate ``path`` as a safetensors file; UsageError (one line) when it is not."""
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            head = f.read(8)
            if len(head) == 8:
                n = int.from_bytes(head, "little")
                head += f.read(min(n, stfile.MAX_HEADER + 1))
    except FileNotFoundError:
        raise UsageError(f"{flag}: '{path}' does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{flag}: '{path}' is a directory, not a safetensors file") from None
    except OSError as e:
        raise UsageError(f"{flag}: cannot read '{path}': {e.strerror}") from None
    try:
        return stfile.parse(head, size)
    except ValueError as e:
        raise UsageError(f"{flag}: '{path}' is not a valid safetensors file: {e}") from None


def capture_file(store: SideStore, path: Path, flag: str) -> TensorIndex:
    """Store every tensor of the safetensors file at ``path``; return its index."""
    header = read_header(path, flag)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            raise UsageError(f"{flag}: '{path}' is empty")
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            with memoryview(mm) as view:
                with view[: header.data_start] as head:
                    if stfile.parse(head, size) != header:
                        raise UsageError(f"{flag}: '{path}' changed while it was being read")
                return _store_view(store, header, view, size)


def _store_view(store: SideStore, header: stfile.Header, view: memoryview, size: int) -> TensorIndex:
    start = header.data_start

    def put(e: stfile.Entry) -> IndexEntry:
        with view[start + e.begin : start + e.end] as part:
            return IndexEntry(e.name, e.dtype, e.shape, e.size, store.put(part))

    whole = hashlib.sha256()
    with ThreadPoolExecutor(_WORKERS) as pool:
        futs = pool.map(put, header.entries)
        whole.update(view)
        entries = tuple(futs)
    return TensorIndex(header.metadata, entries, size, whole.hexdigest(),
                       None if header.canonical else header.raw.decode("utf-8"))


# -- tensors made in memory --------------------------------------------------
def store_tensors(store: SideStore, items: Iterable[tuple[str, str, tuple[int, ...], bytes]],
                  metadata: dict[str, str] | None = None) -> TensorIndex:
    """Store ``(name, dtype, shape, data)`` items as the canonical safetensors file
    with the tensors in the given order; returns its index."""
    items = list(items)
    entries = stfile.layout((n, d, s) for n, d, s, _ in items)
    for e, (_, _, _, data) in zip(entries, items):
        if len(data) != e.size:
            raise ValueError(f"tensor '{e.name}': {len(data)} bytes for dtype {e.dtype} shape {list(e.shape)}")
    head = stfile.encode_header(metadata, entries)
    whole = hashlib.sha256(stfile.length_prefix(head) + head)
    out = []
    for e, (_, _, _, data) in zip(entries, items):
        whole.update(data)
        out.append(IndexEntry(e.name, e.dtype, e.shape, e.size, store.put(data)))
    size = 8 + len(head) + sum(e.size for e in entries)
    return TensorIndex(metadata, tuple(out), size, whole.hexdigest())


# -- reading back ------------------------------------------------------------
def _ordered(fn: Callable[[str, int], bytes], jobs: list[tuple[str, int]]) -> Iterator[bytes]:
    """``fn(oid, size)`` for ``(oid, size)`` jobs on a thread pool, yielded in order, with at
    most ``_WINDOW_BYTES`` (or one job) in flight."""
    with ThreadPoolExecutor(_WORKERS) as pool:
        pending: list = []
        ahead = 0
        for oid, size in jobs:
            while pending and ahead + size > _WINDOW_BYTES:
                fut, n = pending.pop(0)
                ahead -= n
                yield fut.result()
            pending.append((pool.submit(fn, oid, size), size))
            ahead += size
        for fut, _ in pending:
            yield fut.result()


def iter_tensors(store: SideStore, index: TensorIndex) -> Iterator[tuple[IndexEntry, bytes]]:
    """Every tensor's verified bytes, in data order (missing objects fetched in one batch); a
    frame that does not decode to the size the index gives is refused before it is decoded."""
    store.ensure(index.object_ids())
    read = _ordered(lambda oid, size: store.get(oid, size=size), [(t.sha256, t.size) for t in index.tensors])
    yield from zip(index.tensors, read)


def checked_header(index: TensorIndex) -> bytes:
    """The header to write, checked to describe exactly the indexed tensors in order."""
    head = index.header_bytes()
    total = 8 + len(head) + sum(t.size for t in index.tensors)
    try:
        parsed = stfile.parse(stfile.length_prefix(head) + head, total)
    except ValueError as e:
        raise DataError(f"the stored safetensors header is damaged ({e})") from None
    if total != index.size or [(e.name, e.dtype, e.shape) for e in parsed.entries] != \
            [(t.name, t.dtype, t.shape) for t in index.tensors]:
        raise DataError("the stored safetensors header does not match its tensor index")
    return head


def write_file(store: SideStore, index: TensorIndex, path: Path) -> None:
    """Rebuild the safetensors file at ``path``: the checked header, then every tensor's
    bytes, each verified against its sha256 as it is read from the side store."""
    head = checked_header(index)
    with open(path, "wb") as f:
        f.write(stfile.length_prefix(head) + head)
        for _, data in iter_tensors(store, index):
            f.write(data)
