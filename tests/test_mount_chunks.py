"""The mount's chunk cache: chunks decoded into buffers used again, and chunks stored raw
served from the store's file in place, stay exact and checked."""
from __future__ import annotations

import random

import pytest

from git_pf.core.errors import CorruptObject
from git_pf.mount.lower import ChunkCache, PointerReader
from git_pf.mount.rawchunks import Spans
from git_pf.store.large import Chunk
from git_pf.store.pointer import Pointer
from git_pf.store.sidestore import SideStore
from pagecache_helpers import flip_byte


def stored_chunks(tmp_path, sizes: list[int], raw: bool = False) -> tuple[SideStore, list[Chunk], list[bytes]]:
    """Chunks of these sizes in a new store: random bytes (which zstd stores raw) with ``raw``,
    else hex text (compressed: decoded into the cache's buffers)."""
    store = SideStore(tmp_path / "objects")
    rng = random.Random(11)
    datas = [rng.randbytes(n) if raw else rng.randbytes(n // 2 + 1).hex()[:n].encode() for n in sizes]
    return store, [Chunk(store.put(d), len(d)) for d in datas], datas


def whole(data) -> bytes:
    """What the cache gave for a chunk, as bytes."""
    return b"".join(data.cut(0, len(data))) if isinstance(data, Spans) else bytes(data)


def test_a_view_still_held_keeps_its_bytes_while_later_chunks_are_decoded(tmp_path):
    """A reply still being written holds a view of a chunk the cache has dropped: the buffer
    under it is not decoded into again until that view is gone."""
    store, chunks, datas = stored_chunks(tmp_path, [300_000, 700_000, 450_000, 900_000, 120_000, 650_000])
    cache = ChunkCache(store, limit=1)  # keeps only the newest chunk: every decode drops one
    held = cache.get(chunks[0])
    piece = memoryview(held)[1000:2000]  # as a read's answer slices it
    del held
    for _ in range(3):
        for chunk, data in zip(chunks[1:], datas[1:]):
            assert whole(cache.get(chunk)) == data
    assert bytes(piece) == datas[0][1000:2000]
    del piece
    for _ in range(2):  # now its buffer may be used again: every chunk still reads back exactly
        for chunk, data in zip(chunks, datas):
            assert whole(cache.get(chunk)) == data


@pytest.mark.parametrize("raw", [False, True])
def test_chunks_read_by_threads_at_once_through_a_small_cache_are_exact(tmp_path, raw):
    from concurrent.futures import ThreadPoolExecutor

    sizes = [random.Random(n).randrange(100_000, 1_200_000) for n in range(8)]
    store, chunks, datas = stored_chunks(tmp_path, sizes, raw)
    cache = ChunkCache(store, limit=3 * 1024 * 1024)

    def reader(seed: int) -> int:
        rng = random.Random(seed)
        bad = 0
        for _ in range(60):
            i = rng.randrange(len(chunks))
            view = whole(cache.get(chunks[i]))
            lo = rng.randrange(len(datas[i]))
            bad += view[lo:lo + 5000] != datas[i][lo:lo + 5000]
            cache.prefetch(chunks[i + 1:i + 3])
        return bad

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(reader, range(4))) == 0


def test_chunks_stored_raw_are_served_from_the_store_file_exactly(tmp_path):
    """Random content is stored by zstd in raw blocks: the cache serves it as views of the
    store's file (no decoding), and reads across block and chunk ends give the right bytes."""
    store = SideStore(tmp_path / "objects")
    want = random.Random(11).randbytes(3_000_003)
    large = store.put_large(want)
    assert len(large.chunks) > 2
    cache = ChunkCache(store)
    assert all(isinstance(cache.get(c), Spans) for c in large.chunks)
    reader = PointerReader(cache, Pointer.of(large))
    rng = random.Random(3)
    for _ in range(300):
        off = rng.randrange(len(want))
        n = rng.choice([1, 3, 4096, 131_072, 131_075, 1_048_576])
        assert b"".join(reader.read(off, n)) == want[off:off + n]


def test_a_chunk_stored_raw_whose_file_was_damaged_is_refused(tmp_path):
    """Served in place, a raw chunk is still checked against its frame's checksum: one byte
    changed in the middle of the store's file is refused, not served."""
    store, chunks, datas = stored_chunks(tmp_path, [600_000], raw=True)
    path = store.path_for(chunks[0].oid)
    flip_byte(path, 300_000, mask=1)
    with pytest.raises(CorruptObject, match="checksum"):
        ChunkCache(store).get(chunks[0])
