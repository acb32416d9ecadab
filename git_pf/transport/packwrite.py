"""Writing many blobs into git's object database as one pack, fast.

libgit2 writes loose objects through zlib at ~40 MB/s; side-store objects are
already zstd-compressed, so this writes them as one pack file whose entries
use stored deflate blocks (written around the data, not copied), plus its version-2 ``.idx``, straight
into ``objects/pack/``. Knows nothing of the side store or refs.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterable

from .. import writeback
from ..packfile import BLOB, entry_header, idx_bytes, object_id

_STORED = 65535  # the most bytes one stored deflate block holds
_WRITEBACK_STEP = 32 * 1024 * 1024


def _stored_blocks(view: memoryview) -> list:
    """The deflate part of a zlib stream of stored (uncompressed) blocks holding ``view``.

    Built without copying the data; the stream is ``b"\\x78\\x01"``, these
    pieces, then the big-endian adler32 of the data."""
    pieces: list = []
    n = len(view)
    for off in range(0, max(n, 1), _STORED):
        part = view[off : off + _STORED]
        final = 1 if off + _STORED >= n else 0
        pieces.append(struct.pack("<BHH", final, len(part), len(part) ^ 0xFFFF))
        pieces.append(part)
    return pieces


def blob_id(data) -> str:
    return object_id(BLOB, data).hex()


def write_blobs(git_dir: Path, blobs: Iterable[bytes], count: int | None = None) -> list[str]:
    """Write every blob of ``blobs`` into one new pack; returns their git ids in order.

    With ``count`` given, ``blobs`` may be a lazy iterator of exactly that many
    blobs (so a batch need not sit in memory at once)."""
    if count is None:
        blobs = list(blobs)
        count = len(blobs)
    if not count:
        return []
    pack_dir = Path(git_dir) / "objects" / "pack"
    pack_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=pack_dir, prefix="tmp_pack_pf_")
    ids: list[str] = []
    entries: dict[bytes, tuple[bytes, int, int]] = {}
    try:
        with os.fdopen(fd, "wb") as f:
            digest = hashlib.sha1()

            def out(b: bytes) -> None:
                f.write(b)
                digest.update(b)

            out(b"PACK" + struct.pack(">II", 2, count))
            offset, flushed = 12, 0
            # The blob's SHA-1 and the stream's adler32 run on other cores while
            # this thread writes, CRCs and hashes the pack (all release the GIL).
            with ThreadPoolExecutor(2) as pool:
                for data in blobs:
                    view = memoryview(data)
                    blob_sha = pool.submit(blob_id, view)
                    adler = pool.submit(zlib.adler32, view)
                    crc, length = 0, 0
                    for piece in [entry_header(BLOB, len(view)), b"\x78\x01", *_stored_blocks(view)]:
                        crc = zlib.crc32(piece, crc)
                        length += len(piece)
                        out(piece)
                    trailer = struct.pack(">I", adler.result())
                    crc = zlib.crc32(trailer, crc)
                    length += len(trailer)
                    out(trailer)
                    oid = blob_sha.result()
                    ids.append(oid)
                    sha = bytes.fromhex(oid)
                    if sha not in entries:  # a pack may hold duplicates; the index names each once
                        entries[sha] = (sha, crc, offset)
                    offset += length
                    if offset - flushed >= _WRITEBACK_STEP:
                        f.flush()
                        writeback.start(f.fileno(), flushed, offset - flushed)  # the disk works meanwhile
                        flushed = offset
            if len(ids) != count:
                raise ValueError(f"pack announced {count} objects but got {len(ids)}")
            pack_sum = digest.digest()
            f.write(pack_sum)
            f.flush()
            os.fsync(f.fileno())
        name = pack_dir / f"pack-{pack_sum.hex()}"
        os.chmod(tmp, 0o444)
        os.replace(tmp, name.with_suffix(".pack"))
        idx_tmp = name.with_suffix(".idx.tmp")
        idx_tmp.write_bytes(idx_bytes(list(entries.values()), pack_sum))
        os.chmod(idx_tmp, 0o444)
        os.replace(idx_tmp, name.with_suffix(".idx"))
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return ids
