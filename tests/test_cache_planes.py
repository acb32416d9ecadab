"""How KV pages are stored: byte planes (docs/cache.md §2), read back by their spec, and
pf-kv/1 images (pages stored as they are) still restored bit for bit."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import zstandard

import git_pf.layers.cache as kc
from git_pf.layers.cache import pages as pg, planes
from git_pf.layers.cache.table import PATH, RAW, Page, PageTable, decode, read
from git_pf.core.errors import DataError
from cache_helpers import deterministic_torch  # noqa: F401 (autouse fixture)

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int8]


def _layers(n: int, dtype: torch.dtype, seed: int = 5) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.int8:
        return [(torch.randint(-128, 128, (1, 2, n, 8), generator=g, dtype=torch.int8),
                 torch.randint(-128, 128, (1, 2, n, 8), generator=g, dtype=torch.int8)) for _ in range(2)]
    return [(torch.randn(1, 2, n, 8, generator=g).to(dtype), torch.randn(1, 2, n, 8, generator=g).to(dtype))
            for _ in range(2)]


def _spec_planes(page: bytes, itemsize: int) -> bytes:
    """docs/cache.md: the page's bytes as an n x itemsize matrix, written column by column."""
    rows = [page[i : i + itemsize] for i in range(0, len(page), itemsize)]
    return b"".join(bytes(row[j] for row in rows) for j in range(itemsize))


@pytest.mark.parametrize("itemsize", [1, 2, 4, 8])
def test_split_and_join_follow_the_spec(itemsize):
    page = np.random.default_rng(itemsize).integers(0, 256, 24 * itemsize, dtype=np.uint8)
    stored = planes.split(page, itemsize, np.empty_like(page))
    assert stored.tobytes() == _spec_planes(page.tobytes(), itemsize)
    assert planes.join(stored, itemsize, np.empty_like(page)).tobytes() == page.tobytes()
    with pytest.raises(ValueError):  # an output of another size
        planes.split(page, itemsize, np.empty(page.size - 1, np.uint8))
    if itemsize > 1:
        with pytest.raises(ValueError):  # not whole elements
            planes.split(page[:-1], itemsize, np.empty(page.size - 1, np.uint8))


@pytest.mark.parametrize("dtype", DTYPES)
def test_page_objects_hold_the_pages_as_byte_planes(repo, tmp_path, dtype):
    n = 16 * 3 + 5
    layers, tokens = _layers(n, dtype), list(range(n))
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(layers, tokens, model="m@1"),),
                          allow_empty=True).image
    table = read(repo, image.tree)
    assert b'"version":"pf-kv/2"' in repo.git.revparse_single(f"{image.id}:{PATH.decode()}").data
    itemsize = pg.DTYPES[table.layout.dtype]
    for (a, b), page in zip(table.spans(), table.pages):
        raw = b"".join(t[..., a:b, :].contiguous().view(torch.uint8).numpy().tobytes() for pair in layers for t in pair)
        assert repo.store.get(page.sha256) == _spec_planes(raw, itemsize)
    restored, _ = kc.restore_layers(image.id, repo=repo, model="m@1")
    assert all(torch.equal(h.view(torch.uint8), w.contiguous().view(torch.uint8))
               for pair, rpair in zip(layers, restored) for w, h in zip(pair, rpair))


def test_planes_make_fp16_pages_smaller_than_their_bytes_compressed_as_they_are(repo, tmp_path):
    """The point of the encoding: random fp16 K/V compress about 8% as they are, about 15% as planes."""
    n = 16 * 8
    layers = [(torch.randn(1, 8, n, 128).half(), torch.randn(1, 8, n, 128).half())]
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(layers, list(range(n)), model="m@1"),),
                          allow_empty=True).image
    table = read(repo, image.tree)
    stored = sum(repo.store.frame_size(p.sha256) for p in table.pages)
    as_they_are = sum(len(zstandard.ZstdCompressor(level=1).compress(
        b"".join(t[..., a:b, :].contiguous().view(torch.uint8).numpy().tobytes() for t in layers[0])))
        for a, b in table.spans())
    assert stored < 0.95 * as_they_are and stored < 0.88 * table.nbytes


class _RawTable:
    """Writes a pf-kv/1 page table, as images made before byte planes hold it."""

    name = "cache"

    def __init__(self, table: PageTable):
        self.table = table

    def write(self, repo, edit, parent) -> dict:
        edit.put_file(PATH, self.table.encode())
        return self.table.summary()


def test_a_pf_kv_1_image_with_pages_stored_as_they_are_still_restores(repo, tmp_path):
    n = 16 * 2 + 3
    layers, tokens = _layers(n, torch.float16), list(range(n))
    captured = kc.capture(layers, tokens, model="m@1")
    raw_pages = []
    for page, data in zip(captured.table.pages, captured.data):
        oid = repo.store.put(bytes(data))  # named by the sha256 of the page bytes themselves
        raw_pages.append(Page(page.id, oid, page.size))
    old = PageTable(captured.table.layout, "m@1", None, tuple(tokens), tuple(raw_pages), RAW)
    assert b'"version":"pf-kv/1"' in old.encode() and decode(old.encode()) == old
    assert kc.compare(old, captured.table)["pages_with_different_bytes"] is None  # other encodings
    assert kc.compare(captured.table, captured.table)["pages_with_different_bytes"] == []
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(_RawTable(old),), allow_empty=True).image
    restored, got = kc.restore_layers(image.id, repo=repo, model="m@1")
    assert got == tokens
    assert all(torch.equal(h.view(torch.int16), w.view(torch.int16))
               for pair, rpair in zip(layers, restored) for w, h in zip(pair, rpair))


def test_an_unknown_table_version_is_refused():
    table = kc.capture(_layers(4, torch.float16), list(range(4)), model="m@1").table
    with pytest.raises(DataError, match="unsupported KV cache format 'pf-kv/9'"):
        decode(table.encode().replace(b'"version":"pf-kv/2"', b'"version":"pf-kv/9"'))
