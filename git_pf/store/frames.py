"""Side-store objects as stored: their names and their zstd frames.

An object is named by the sha256 of its raw bytes (``OID_RE``, ``sha256_hex``)
and stored as one zstd frame with a content checksum. This module compresses
and decompresses frames (one compressor and decompressor per thread), finds
the size a frame decodes to before any of it is kept (``decoded_size``,
refused past ``pf.maxFrameSize``) and checks a frame received from elsewhere
(``verify_frame``). Pure computation on buffers: it opens no file, and knows
nothing of the store's directory, chunking, images or transport.
"""
from __future__ import annotations

import hashlib
import re
import threading
from typing import Callable

import zstandard

from ..core import limits
from . import directio
from ..core.errors import CorruptObject, WriteFailed

OID_RE = re.compile(r"^[0-9a-f]{64}$")
ZSTD_LEVEL = 3
_STREAM_PIECE = 1 << 20  # bytes a frame is decoded in when it is only counted or hashed
_local = threading.local()


def compressor(level: int = ZSTD_LEVEL, window_log: int | None = None) -> zstandard.ZstdCompressor:
    cache = getattr(_local, "cctx", None)
    if cache is None:
        cache = _local.cctx = {}
    c = cache.get((level, window_log))
    if c is None:
        if window_log is None:
            c = zstandard.ZstdCompressor(level=level, write_content_size=True, write_checksum=True)
        else:
            params = zstandard.ZstdCompressionParameters.from_level(level, window_log=window_log,
                                                                     write_content_size=1, write_checksum=1)
            c = zstandard.ZstdCompressor(compression_params=params)
        cache[(level, window_log)] = c
    return c


def decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def zstd_problem(e: zstandard.ZstdError) -> str:
    return "its content checksum does not match" if "checksum" in str(e) else "it does not decode as a zstd frame"


def _stream(frame, stop: int, sink: Callable | None = None) -> int:
    """Decode ``frame`` a piece at a time (nothing kept unless ``sink`` keeps it), handing each
    piece to ``sink``; the bytes it decodes to, or ``stop + 1`` once it goes past ``stop``."""
    total = 0
    with decompressor().stream_reader(frame, read_size=_STREAM_PIECE) as reader:
        while total <= stop:
            piece = reader.read(min(_STREAM_PIECE, stop + 1 - total))
            if not piece:
                break
            total += len(piece)
            if sink is not None:
                sink(piece)
    return min(total, stop + 1)


def decode_into(frame, out, n: int) -> memoryview:
    """Decode ``frame``, of ``n`` bytes' content (``decoded_size``), into the first ``n`` bytes
    of the writable buffer ``out`` (reused by the caller: no fresh memory to fault in); a view
    of them. The frame's checksum is checked at its end, as ``decompress`` checks it; ZstdError
    when it does not match or the frame ends short."""
    view = memoryview(out)[:n]
    got = 0
    with decompressor().stream_reader(frame, read_across_frames=False) as reader:
        while got < n:
            k = reader.readinto(view[got:])
            if not k:
                break
            got += k
        if got != n or reader.read(1):  # read(1) reaches the frame's end, where its checksum is
            raise zstandard.ZstdError("the frame does not decode to the size it declares")
    return view


def stored_bound(size: int) -> int:
    """The most bytes one frame of ``size`` bytes' content can take as stored (zstd's
    compress bound, with room for the frame's header and checksum): a stored frame larger
    than that is not that object's, and is refused before it is read."""
    return size + (size >> 7) + 1024


def decoded_size(frame, oid: str, size: int | None = None, at_most: int | None = None) -> int:
    """The bytes ``frame`` (of object ``oid``) decodes to, found before any of them is kept:
    its header's content size, or, for a frame that does not declare one, a count while
    decoding it into nothing. CorruptObject when that differs from ``size`` (what the caller
    expects: a pointer's, a chunk index entry's, a tensor's or a KV page's size) or passes
    ``at_most`` or ``pf.maxFrameSize``; ZstdError when the header does not parse."""
    limit = limits.active().max_frame
    cap = limit if at_most is None else min(at_most, limit)
    if size is not None and size > cap:
        raise CorruptObject(f"side-store object {oid} is refused: {size} bytes expected, over the "
                            f"{cap} bytes a read may inflate (pf.maxFrameSize)")
    declared = zstandard.frame_content_size(frame)
    stop = cap if size is None else size
    n = declared if declared >= 0 else _stream(frame, stop)
    shown = f"more than {stop}" if declared < 0 and n > stop else str(n)
    if size is not None and n != size:
        raise CorruptObject(f"side-store object {oid} is corrupt (it inflates to {shown} bytes, {size} expected)")
    if n > cap:
        raise CorruptObject(f"side-store object {oid} is refused: it inflates to {shown} bytes, over the "
                            f"{cap} bytes a read may inflate (pf.maxFrameSize)")
    return n


def verify_frame(oid: str, frame) -> None:
    """Check a zstd frame received from elsewhere: CorruptObject unless it decodes, within
    ``pf.maxFrameSize``, to bytes that hash to ``oid``. Decoded a piece at a time, so it
    costs no memory for its content."""
    try:
        n = decoded_size(frame, oid)
        digest = hashlib.sha256()
        if _stream(frame, n, digest.update) != n:
            raise CorruptObject(f"object {oid[:12]} received corrupt (its size is not the one it declares)")
    except zstandard.ZstdError as e:
        raise CorruptObject(f"object {oid[:12]} received corrupt: {e}") from None
    actual = digest.hexdigest()
    if actual != oid:
        raise CorruptObject(f"object {oid[:12]} received corrupt (content hashes to {actual[:12]})")


def sha256_hex(data) -> str:
    return hashlib.sha256(data).hexdigest()


def has_checksum(frame) -> bool:
    """Whether a zstd frame (one that decoded) carries a content checksum, which the decoder
    then checks (the frame header descriptor's bit 2)."""
    return bool(frame[4] & 0x04)


def compress_into_buffer(data, level: int, window_log: int | None) -> int:
    """Compress ``data`` (any contiguous buffer) into this thread's ``directio`` buffer; the
    frame's length. The frame is the one ``compress`` makes, content size included."""
    src = memoryview(data).cast("B")
    bound = len(src) + (len(src) >> 7) + (1 << 16)  # above zstd's worst case (compressBound)
    out, got = memoryview(directio.buffer(bound))[:bound], 0
    if len(src) < directio.MIN_BYTES:  # written buffered anyway; and a stream of nothing never ends
        frame = compressor(level, window_log).compress(src)
        out[: len(frame)] = frame
        return len(frame)
    with compressor(level, window_log).stream_reader(src, size=len(src)) as reader:
        while got < bound:
            n = reader.readinto(out[got:])
            if not n:
                return got
            got += n
    raise WriteFailed(f"a frame of {len(src)} bytes compressed past its bound")

