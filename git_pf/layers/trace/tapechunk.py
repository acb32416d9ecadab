"""Packed tape chunks: consecutive tape entries in one zstd-compressed blob (docs/format.md,
"8.1 trace/tape/", "Packed chunks").

A chunk holds up to ``CHUNK_ENTRIES`` entries (fewer when the next one would take its content
past ``CHUNK_BYTES``, or when the tape ends). Its content is the entries' canonical bytes one
after another (canonical JSONL: each ends in its one newline). It is stored as one zstd frame
declaring its decoded size, of the content's columns (``tapecols``, tape layouts 3 and 4, which
the columns' first line tells apart: named
``<first seq:08d>+<count:04d>-<first 16 hex of the content's sha256>.col.zst``) or, when the
entries do not come back from columns byte for byte, of the content itself (layout 2: the same
name ending in ``.zst``). A tape's first column chunk is its ``Base``: each later column chunk
is compressed against its columns (and names their hash). ``fits`` is the one grouping rule,
``pack`` the one encoding; ``unpack`` checks an untrusted chunk of either layout (sizes before
anything is decompressed, the decoded size capped, the base it names) and gives back its
entries. Pure computation on bytes: no git.
"""
from __future__ import annotations

import hashlib
import re

import zstandard

from ...core import limits
from ...core.errors import DataError
from ...store.frames import compressor, decompressor, stored_bound
from . import tapecols

CHUNK_ENTRIES = 256
CHUNK_BYTES = 8 << 20
LEVEL = 9  # zstd's level for a chunk: written once per 256 entries, so a slower, smaller one
NAME = re.compile(rb"\A([0-9]{8})\+([0-9]{4})-([0-9a-f]{16})(?:-([0-9a-f]{16}))?(\.col)?\.zst\Z")
_BASE, _COLUMNS = 4, 5  # NAME's groups: the base a chunk is compressed against; column chunks (layouts 3, 4)
_MAX_SEQ = 10**8


class Base:
    """The columns of a tape's first chunk (seq 0), which every later column chunk of the tape is
    compressed against as a raw-content zstd dictionary: each then starts with the context a single
    stream would have. Named by the first 16 hex of its columns' sha256."""

    def __init__(self, columns: bytes):
        self.columns = columns
        self.digest = hashlib.sha256(columns).hexdigest()[:16].encode()
        self._dict = zstandard.ZstdCompressionDict(columns, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
        self._compressor = self._decompressor = None

    def compress(self, data: bytes) -> bytes:
        if self._compressor is None:
            self._compressor = zstandard.ZstdCompressor(level=LEVEL, dict_data=self._dict, write_checksum=True)
        return self._compressor.compress(data)

    def decompress(self, blob: bytes, size: int) -> bytes:
        if self._decompressor is None:
            self._decompressor = zstandard.ZstdDecompressor(dict_data=self._dict)
        return self._decompressor.decompress(blob, max_output_size=size, allow_extra_data=False)


def fits(count: int, size: int, entry: int) -> bool:
    """Whether an entry of ``entry`` bytes joins a chunk holding ``count`` entries of ``size`` bytes
    (an empty chunk takes any entry)."""
    return count == 0 or (count < CHUNK_ENTRIES and size + entry <= CHUNK_BYTES)


def groups(entries: list[bytes]) -> list[list[bytes]]:
    """``entries`` cut into chunks by ``fits``, in order."""
    out: list[list[bytes]] = []
    size = 0
    for data in entries:
        if not out or not fits(len(out[-1]), size, len(data)):
            out.append([])
            size = 0
        out[-1].append(data)
        size += len(data)
    return out


def pack(first: int, entries: list[bytes], base: Base | None = None) -> tuple[bytes, bytes, Base | None]:
    """``(name, blob, the Base it gives)`` of the chunk holding ``entries`` (canonical bytes,
    newline-ended) from seq ``first``: its columns when they give the entries back and fit
    ``columns_cap``, else its content. A column chunk from seq 0 is the tape's Base (the third
    item); a later one is compressed against ``base``, the tape's, when there is one."""
    content = b"".join(entries)
    digest = hashlib.sha256(content).hexdigest()[:16].encode()
    columns = tapecols.encode(entries)
    if columns is None or len(columns) > columns_cap(len(entries)):
        return b"%08d+%04d-%s.zst" % (first, len(entries), digest), compressor(LEVEL).compress(content), None
    if first == 0:
        return b"%08d+%04d-%s.col.zst" % (first, len(entries), digest), compressor(LEVEL).compress(columns), Base(columns)
    if base is None:
        return b"%08d+%04d-%s.col.zst" % (first, len(entries), digest), compressor(LEVEL).compress(columns), None
    return b"%08d+%04d-%s-%s.col.zst" % (first, len(entries), digest, base.digest), base.compress(columns), None


def base_of(name: bytes) -> bytes | None:
    """The digest of the Base a well-formed chunk name says its chunk is compressed against, if any."""
    return NAME.match(name)[_BASE]


def span(name: bytes) -> tuple[int, int] | None:
    """``(first seq, count)`` a well-formed chunk name gives, else None."""
    m = NAME.match(name)
    if not m:
        return None
    first, count = int(m[1]), int(m[2])
    if m[_BASE] is not None and (first == 0 or m[_COLUMNS] is None):  # only a later column chunk has a base
        return None
    return (first, count) if 1 <= count <= CHUNK_ENTRIES and first + count <= _MAX_SEQ else None


def cap(count: int) -> int:
    """The most bytes a chunk of ``count`` entries' content may be (a plain chunk's frame decodes
    to it): ``CHUNK_BYTES``, or for a chunk of one entry the larger of that and ``pf.maxJsonLine``
    (an entry alone may be that large)."""
    return CHUNK_BYTES if count > 1 else max(CHUNK_BYTES, limits.active().max_json_line)


def columns_cap(count: int) -> int:
    """The most bytes the columns of a chunk of ``count`` entries may take: twice ``cap`` (a
    column chunk's shapes and columns are a few bytes a value larger than its entries)."""
    return 2 * cap(count)


def stored_cap(count: int) -> int:
    """The largest blob a chunk of ``count`` entries may be, in either layout: checked before it is read."""
    return stored_bound(columns_cap(count))


def unpack(name: bytes, blob: bytes, where: str, base: Base | None = None) -> tuple[list[bytes], Base | None]:
    """The entries of chunk ``name`` (already checked by ``span``) held in ``blob``, and the Base it
    gives (a column chunk from seq 0); ``base`` is the one its name refers to, if any (the caller
    finds it by ``base_of``). A DataError ``where: ...`` when the blob is not one zstd frame
    declaring a content size within ``cap`` (``columns_cap`` for columns), ``base`` is not the
    one named, its columns (layouts 3, 4) are malformed or would decode past ``cap``, or its
    content's hash, entry count or line ends are not what the name says."""
    first, count = span(name)
    m = NAME.match(name)
    columns = m[_COLUMNS] is not None
    bound = columns_cap(count) if columns else cap(count)
    if m[_BASE] is not None and (base is None or base.digest != m[_BASE]):
        raise DataError(f"{where}: the chunk it is compressed against (the tape's first, whose columns' hash "
                        f"is {m[_BASE].decode()}) is not in the tape, or not sound")
    try:
        declared = zstandard.frame_content_size(blob)
    except zstandard.ZstdError:
        raise DataError(f"{where}: not a zstd frame") from None
    if declared < 0 or declared > bound:
        raise DataError(f"{where}: its frame must declare a content size of at most {bound} bytes"
                        f" ({'none' if declared < 0 else declared} declared)")
    try:
        if m[_BASE] is not None:
            content = base.decompress(blob, declared)
        else:
            content = decompressor().decompress(blob, max_output_size=declared, allow_extra_data=False)
    except zstandard.ZstdError as e:
        raise DataError(f"{where}: does not decode as one zstd frame ({e})") from None
    payload = content
    if columns:
        try:
            content = tapecols.decode(payload, count, cap(count))
        except DataError as e:
            raise DataError(f"{where}: {e.message}") from None
    if hashlib.sha256(content).hexdigest()[:16].encode() != m[3]:
        raise DataError(f"{where}: its name does not match its content")
    lines = content.split(b"\n")
    if lines[-1] or len(lines) - 1 != count:
        raise DataError(f"{where}: must hold {count} newline-ended entries")
    return [line + b"\n" for line in lines[:-1]], Base(payload) if columns and first == 0 else None
