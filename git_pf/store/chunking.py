"""Content-defined chunking (FastCDC) of large content.

Splits bytes into chunks whose boundaries depend on the content, so an insert
near the start of a large file changes only the chunks around it. Chunk size
parameters are part of the store format (docs/sidestore.md): changing them
changes chunk ids. Pure computation; no I/O beyond the buffer it is given.
"""
from __future__ import annotations

from typing import Iterator

from pyfastcdc.cy import FastCDC

MIN_CHUNK = 128 * 1024
AVG_CHUNK = 512 * 1024
MAX_CHUNK = 2 * 1024 * 1024

_cutter = FastCDC(avg_size=AVG_CHUNK, min_size=MIN_CHUNK, max_size=MAX_CHUNK)


def chunk_spans(buf) -> Iterator[tuple[int, int]]:
    """Yield ``(offset, length)`` of each chunk of ``buf`` (bytes or memoryview), in order."""
    if len(buf) <= MIN_CHUNK:
        if len(buf):
            yield 0, len(buf)
        return
    for chunk in _cutter.cut_buf(buf):
        yield chunk.offset, chunk.length
