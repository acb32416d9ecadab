"""KV pages of unusual layouts: K and V of other shapes, strided sources, bf16, many pages; bit-exact both ways."""
from __future__ import annotations

import pytest
import torch

import git_pf.layers.cache as kc
from git_pf.layers.cache import pages as pg
from git_pf.layers.cache.table import read
from cache_helpers import deterministic_torch  # noqa: F401 (autouse fixture)


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.uint8)


def _reference_page(layers, a: int, b: int) -> bytes:
    """The spec's page bytes (docs/cache.md §2), built the slow, obvious way."""
    return b"".join(_bits(t[..., a:b, :]).numpy().tobytes() for pair in layers for t in pair)


def _mixed_layers(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Layers whose K and V differ in heads and head dim, one of them a strided view of a wider buffer."""
    g = torch.Generator().manual_seed(7)
    k0 = torch.randn(1, 2, n, 8, generator=g).to(torch.bfloat16)
    v0 = torch.randn(1, 3, n, 4, generator=g).to(torch.bfloat16)
    wide = torch.randn(1, 2, n + 5, 8, generator=g).to(torch.bfloat16)
    k1 = wide[:, :, 5:, :]  # not contiguous: every head skips 5 tokens of the buffer
    v1 = torch.randn(1, 2, 8, n, generator=g).to(torch.bfloat16).transpose(-1, -2)  # last axis strided
    k2 = torch.randn(1, 3, n, 4, generator=g).to(torch.bfloat16)
    v2 = torch.randn(1, 3, n, 4, generator=g).to(torch.bfloat16)
    return [(k0, v0), (k1, v1), (k2, v2)]


@pytest.mark.parametrize("n", [0, 3, 16, 16 * 21 + 5])
def test_capture_cuts_the_spec_bytes_and_restore_puts_them_back(repo, tmp_path, n):
    layers = _mixed_layers(n)
    tokens = list(range(1000, 1000 + n))
    snap = kc.capture(layers, tokens, model="mixed@1", page_tokens=4)
    spans = pg.spans(n, 4)
    assert [bytes(d) for d in snap.data] == [_reference_page(layers, a, b) for a, b in spans]
    assert len(snap.data) > 8 or n < 40  # the largest case spans several cut-and-hash jobs

    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(kc.CacheInput(snap),), allow_empty=True).image
    assert read(repo, image.tree) == snap.table
    restored, got = kc.restore_layers(image.id, repo=repo, model="mixed@1")
    assert got == tokens
    for (k, v), (rk, rv) in zip(layers, restored):
        for want, have in ((k, rk), (v, rv)):
            assert have.shape == want.shape and have.dtype == want.dtype and have.is_contiguous()
            assert torch.equal(_bits(have), _bits(want))
    # the restored tensors are independent of each other: writing one leaves the rest as they were
    restored[0][0].zero_()
    assert torch.equal(_bits(restored[0][1]), _bits(layers[0][1]))
    assert torch.equal(_bits(restored[1][0]), _bits(layers[1][0]))


@pytest.mark.parametrize("n", [0, 3, 16 * 21 + 5])
def test_a_cache_paged_while_the_snapshot_is_written_equals_a_capture(repo, tmp_path, n):
    """``CacheInput.from_cache`` copies nothing up front: its pages are cut, hashed and
    stored while the snapshot is written, and give exactly the table and bytes an eager
    capture gives."""
    layers = _mixed_layers(n)
    tokens = list(range(1000, 1000 + n))
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    lazy = kc.CacheInput.from_cache(layers, tokens, model="mixed@1", page_tokens=4)
    assert lazy.captured is None  # nothing copied yet
    image = repo.snapshot(sandbox, layers=(lazy,), allow_empty=True).image
    assert read(repo, image.tree) == kc.capture(layers, tokens, model="mixed@1", page_tokens=4).table
    restored, got = kc.restore_layers(image.id, repo=repo, model="mixed@1")
    assert got == tokens
    assert all(torch.equal(_bits(h), _bits(w)) for pair, rpair in zip(layers, restored) for w, h in zip(pair, rpair))


def test_pages_with_the_same_bytes_are_stored_once_when_paged_at_snapshot(repo, tmp_path):
    """Jobs page a cache on several threads; a page repeated anywhere in it (here every
    page is one of two patterns) is one side-store object, whichever job gets to it first."""
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(1, 2, 4, 8, generator=g), torch.randn(1, 2, 4, 8, generator=g)
    pattern = [a, b, a, a, b, b, a, b] * 5  # 40 pages of 4 tokens, two distinct byte patterns
    layers = [(torch.cat(pattern, dim=-2), torch.cat(pattern, dim=-2))]
    tokens = list(range(4 * len(pattern)))
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    before = set(repo.store.iter_oids())
    inp = kc.CacheInput.from_cache(layers, tokens, model="rep@1", page_tokens=4)
    image = repo.snapshot(sandbox, layers=(inp,), allow_empty=True).image
    table = read(repo, image.tree)
    assert len(table.pages) == 40 and len({p.sha256 for p in table.pages}) == 2
    assert set(repo.store.iter_oids()) - before == {p.sha256 for p in table.pages}
    assert inp.new_objects == 2
    restored, _ = kc.restore_layers(image.id, repo=repo, model="rep@1")
    assert torch.equal(restored[0][0], layers[0][0])
