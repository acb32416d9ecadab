"""Large content in the side store: chunks, chunk indexes and the large-object layout.

Large content is split into FastCDC chunks (``chunking``), one object per
chunk, plus a chunk-index object (one ``<oid> <size>`` line per chunk) when
there is more than one chunk (docs/sidestore.md). ``LargeContent`` is the part
of ``SideStore`` that stores, lists and reads such content through the
store's single-object calls (``put``, ``get``, ``ensure``, ``frame``,
``record_hashed``); it touches no file itself, and knows nothing of pointers, images or transport.
"""
from __future__ import annotations

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Iterable, Iterator

import zstandard

from ..core import limits
from .chunking import MIN_CHUNK, chunk_spans
from .frames import OID_RE, decoded_size, zstd_problem
from .objectio import WORKERS, read_ahead
from ..core.errors import CorruptObject


@dataclass(frozen=True)
class Chunk:
    oid: str
    size: int


@dataclass(frozen=True)
class LargeObject:
    """A large content item as stored: its whole-content oid, size and chunk list."""

    oid: str
    size: int
    chunks: tuple[Chunk, ...]
    index_oid: str | None  # the chunk-index object; None when there is a single chunk


def encode_chunk_index(chunks: Iterable[Chunk]) -> bytes:
    return "".join(f"{c.oid} {c.size}\n" for c in chunks).encode("ascii")


def decode_chunk_index(data: bytes) -> tuple[Chunk, ...]:
    """The chunks a chunk index lists; ValueError when a line is not ``<oid> <size>``."""
    out = []
    for line in data.decode("ascii").splitlines():
        oid, size = line.split(" ")
        if not OID_RE.match(oid) or not size.isdigit():
            raise ValueError(f"malformed chunk index line {line[:80]!r}")
        out.append(Chunk(oid, int(size)))
    return tuple(out)


def index_bound(size: int) -> int:
    """The most bytes the chunk index of content of ``size`` bytes can take: every chunk but
    the last is at least ``MIN_CHUNK`` bytes, and each line is an oid, a space, a size of at
    most as many digits as ``size`` and a newline."""
    return (size // MIN_CHUNK + 1) * (64 + 1 + len(str(size)) + 1)


def _identity(fd: int | None) -> tuple | None:
    """What a write to the file ``fd`` changes (times, size, inode); None without one."""
    if fd is None:
        return None
    st = os.fstat(fd)
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


class LargeContent:
    """Chunked storage of large content, mixed into ``SideStore``."""

    def put_large(self, buf, source_fd: int | None = None) -> LargeObject:
        """Chunk ``buf`` (bytes, memoryview or mmap), store every chunk, return the layout.

        The whole content's hash is recorded for a transport (``record_hashed``) when ``buf``
        cannot have changed while it was read: it is ``bytes``, or the file ``source_fd`` it
        maps kept its size, times and inode meanwhile (a file written to while it is read
        could give chunks other bytes than the hash saw)."""
        before = _identity(source_fd)
        with memoryview(buf) as view:
            spans = list(chunk_spans(view))

            def store(span: tuple[int, int]) -> Chunk:
                off, n = span
                with view[off : off + n] as part:
                    return Chunk(self.put(part), n)

            whole = hashlib.sha256()
            with ThreadPoolExecutor(WORKERS) as pool:
                futures = [pool.submit(store, span) for span in spans]
                whole.update(view)
                chunks = tuple(f.result() for f in futures)
            size = len(view)
        index_oid = self.put(encode_chunk_index(chunks)) if len(chunks) > 1 else None
        unchanged = isinstance(buf, bytes) or (before is not None and _identity(source_fd) == before)
        if index_oid is not None and unchanged:
            self.record_hashed(index_oid, whole.hexdigest(), size)  # a transport may name the chunks' bytes by it
        return LargeObject(whole.hexdigest(), size, chunks, index_oid)

    def chunks_of(self, oid: str, size: int, index_oid: str | None) -> tuple[Chunk, ...]:
        """The chunks of large object ``oid`` of ``size`` bytes, checked to add up to ``size``;
        CorruptObject when they do not, or when ``size`` is over ``pf.maxObjectSize``."""
        limit = limits.active().max_object
        if size > limit:
            raise CorruptObject(f"large object {oid} claims {size} bytes, over pf.maxObjectSize ({limit})")
        if index_oid is None:
            return (Chunk(oid, size),) if size else ()
        try:
            chunks = decode_chunk_index(self.get(index_oid, at_most=index_bound(size)))
        except (ValueError, UnicodeDecodeError) as e:
            raise CorruptObject(f"chunk index {index_oid} of large object {oid} is malformed ({e})") from None
        if sum(c.size for c in chunks) != size:
            raise CorruptObject(f"chunk index {index_oid} of large object {oid}: its chunk sizes do not "
                                f"add up to {size} bytes")
        return chunks

    def check_size(self, oid: str, size: int) -> None:
        """CorruptObject unless the stored frame of ``oid`` decodes to ``size`` bytes, told by
        its header (or a count, for a frame that does not declare it) without keeping any."""
        try:
            decoded_size(self.frame(oid), oid, size)
        except zstandard.ZstdError as e:
            raise CorruptObject(f"side-store object {oid} is corrupt ({zstd_problem(e)})") from None

    def iter_large(self, oid: str, size: int, index_oid: str | None) -> Iterator[bytes]:
        """Yield the verified chunks of a large object.

        Integrity is a hash chain: the chunk index is verified against its name,
        every chunk against its name and its size against the index (whose sizes add up
        to ``size``, ``chunks_of``), so the whole content needs no second hash pass (``oid`` names the whole
        content; with a single chunk it is that chunk's name)."""
        chunks = self.chunks_of(oid, size, index_oid)
        self.ensure(c.oid for c in chunks)

        def load(c: Chunk) -> bytes:
            return self.get(c.oid, size=c.size)  # refused unless it decodes to c.size bytes

        # Chunks are read, decoded and verified a few ahead on other threads (all of
        # that releases the GIL) while the caller writes the current one.
        yield from read_ahead(load, chunks)
