"""The mount's decoded-chunk cache: chunks decoded into buffers used again stay exact."""
from __future__ import annotations

import random

from git_pf.mount.lower import ChunkCache
from git_pf.store.large import Chunk
from git_pf.store.sidestore import SideStore


def stored_chunks(tmp_path, sizes: list[int]) -> tuple[SideStore, list[Chunk], list[bytes]]:
    store = SideStore(tmp_path / "objects")
    rng = random.Random(11)
    datas = [rng.randbytes(n) for n in sizes]
    return store, [Chunk(store.put(d), len(d)) for d in datas], datas


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
            assert bytes(cache.get(chunk)) == data
    assert bytes(piece) == datas[0][1000:2000]
    del piece
    for _ in range(2):  # now its buffer may be used again: every chunk still reads back exactly
        for chunk, data in zip(chunks, datas):
            assert bytes(cache.get(chunk)) == data


def test_chunks_read_by_threads_at_once_through_a_small_cache_are_exact(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    store, chunks, datas = stored_chunks(tmp_path, [random.Random(n).randrange(100_000, 1_200_000) for n in range(8)])
    cache = ChunkCache(store, limit=3 * 1024 * 1024)

    def reader(seed: int) -> int:
        rng = random.Random(seed)
        bad = 0
        for _ in range(60):
            i = rng.randrange(len(chunks))
            view = cache.get(chunks[i])
            lo = rng.randrange(len(datas[i]))
            bad += bytes(view[lo:lo + 5000]) != datas[i][lo:lo + 5000]
            cache.prefetch(chunks[i + 1:i + 3])
        return bad

    with ThreadPoolExecutor(4) as pool:
        assert sum(pool.map(reader, range(4))) == 0
