"""KV cache negative controls: re-prefill is not the same cache, corrupt pages and wrong models are refused."""
from __future__ import annotations

import json
import os

import pytest
import torch
import zstandard
from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf.layers.cache.table import read
from git_pf.core.errors import CorruptObject
from cache_helpers import deterministic_torch, decode, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)


def _decoded_cache(model, n_prompt=24, steps=10):
    cache = DynamicCache()
    tokens = prompt(n_prompt, seed=2)
    logits = feed(model, cache, tokens)
    fed, _ = decode(model, cache, int(logits.argmax()), steps)
    return cache, tokens + fed


def _snapshot(repo, tmp_path, cache, tokens, model):
    sandbox = tmp_path / "sb"
    sandbox.mkdir(exist_ok=True)
    return repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(cache, tokens, model=model),), allow_empty=True).image


def test_reprefilled_cache_is_reported_different():
    model = tiny_llama()
    cache, tokens = _decoded_cache(model)
    rebuilt = DynamicCache()
    feed(model, rebuilt, tokens)  # one prefill over the same tokens
    a = kc.capture(cache, tokens, model=model).table
    b = kc.capture(rebuilt, tokens, model=model).table
    report = kc.compare(a, b)
    assert [p.id for p in a.pages] == [p.id for p in b.pages]  # same tokens, model, layout: same page ids
    assert not report["identical"]
    assert report["pages_with_different_bytes"], "a re-prefilled cache differs in its bytes"
    assert kc.compare(a, kc.capture(cache, tokens, model=model).table)["identical"]
    # and the drift is real: decoding on from the rebuilt cache gives other logits
    _, live = decode(model, cache, 3, 6)
    _, again = decode(model, rebuilt, 3, 6)
    assert any(not x.view(torch.int32).equal(y.view(torch.int32)) for x, y in zip(live, again))


def _flip_one_bit(store, oid: str) -> None:
    path = store.path_for(oid)
    raw = bytearray(zstandard.ZstdDecompressor().decompress(path.read_bytes()))
    raw[len(raw) // 2] ^= 0x01
    os.chmod(path, 0o644)
    path.write_bytes(zstandard.ZstdCompressor(level=3).compress(bytes(raw)))


def test_flipped_bit_in_stored_page_is_caught_on_restore(repo, tmp_path, run_pf):
    model = tiny_llama()
    cache, tokens = _decoded_cache(model)
    image = _snapshot(repo, tmp_path, cache, tokens, model)
    table = read(repo, image.tree)
    kc.restore(image.id, repo=repo, model=model)  # sound before the damage
    _flip_one_bit(repo.store, table.pages[1].sha256)
    with pytest.raises(CorruptObject):
        kc.restore(image.id, repo=repo, model=model)
    proc = run_pf("checkout", image.id, "--layers", "cache", "--into", tmp_path / "out", cwd=tmp_path / "repo",
                  check=False)
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1 and "corrupt" in proc.stderr
    assert not (tmp_path / "out").exists()
    repo.store.remove(table.pages[1].sha256)  # leave the repository sound for the fixture's git fsck


def test_a_bit_flipped_on_disk_in_a_stored_page_is_caught_on_restore(repo, tmp_path):
    """Damage as a disk does it: one bit of the stored frame, not a frame made again."""
    model = tiny_llama()
    cache, tokens = _decoded_cache(model)
    image = _snapshot(repo, tmp_path, cache, tokens, model)
    table = read(repo, image.tree)
    for page in table.pages[:3]:
        path = repo.store.path_for(page.sha256)
        sound = path.read_bytes()
        assert zstandard.get_frame_parameters(sound).has_checksum
        frame = bytearray(sound)
        frame[len(frame) // 4] ^= 0x04  # in the first plane: the low mantissa bytes, stored raw
        os.chmod(path, 0o644)
        path.write_bytes(frame)
        with pytest.raises(CorruptObject, match=page.sha256):
            kc.restore(image.id, repo=repo, model=model)
        path.write_bytes(sound)
    kc.restore(image.id, repo=repo, model=model)


def test_restore_refuses_other_model_adapter_or_layout(repo, tmp_path):
    model = tiny_llama()
    cache, tokens = _decoded_cache(model, steps=2)
    image = _snapshot(repo, tmp_path, cache, tokens, model)
    with pytest.raises(kc.CacheMismatch, match="captured for model"):
        kc.restore(image.id, repo=repo, model=tiny_llama(seed=1))  # same shapes, other weights
    with pytest.raises(kc.CacheMismatch, match="adapter"):
        kc.restore(image.id, repo=repo, model=model, adapter="lora-a")
    fp = kc.fingerprint(model)
    with pytest.raises(kc.CacheMismatch, match="does not fit"):
        kc.restore(image.id, repo=repo, model=fp, config=tiny_llama(layers=3).config)
    with pytest.raises(kc.CacheMismatch, match="float16"):
        kc.restore(image.id, repo=repo, model=fp, dtype=torch.float16)
    restored, got = kc.restore(image.id, repo=repo, model=fp, config=model.config, dtype=torch.float32)
    assert got == tokens


def test_page_ids_chain_over_model_adapter_and_layout():
    model = tiny_llama()
    cache, tokens = _decoded_cache(model, steps=0)
    base = kc.capture(cache, tokens, model="m@1").table
    assert kc.capture(cache, tokens, model="m@1").table.encode() == base.encode()  # deterministic
    for other in (kc.capture(cache, tokens, model="m@2").table,
                  kc.capture(cache, tokens, model="m@1", adapter="a").table,
                  kc.capture(cache, tokens, model="m@1", page_tokens=8).table):
        assert not {p.id for p in other.pages} & {p.id for p in base.pages}
    # a longer sequence with the same prefix keeps the prefix's full-page ids
    longer = kc.capture(cache, tokens, model="m@1").table
    shorter_cache = {i: (l.keys[..., :16, :], l.values[..., :16, :]) for i, l in enumerate(cache.layers)}
    shorter = kc.capture(shorter_cache, tokens[:16], model="m@1").table
    assert shorter.pages[0] == longer.pages[0]


def test_damaged_page_table_is_a_data_error():
    from git_pf.layers.cache import table as table_mod
    from git_pf.core.errors import DataError

    model = tiny_llama()
    cache, tokens = _decoded_cache(model, steps=0)
    doc = kc.capture(cache, tokens, model="m@1").table.to_json()
    table_mod.decode(table_mod.PageTable.encode(table_mod.decode(json.dumps(doc).encode())))
    for key, value in (("tokens", doc["tokens"][:-1] + [doc["tokens"][-1] ^ 1]),
                       ("dtype", "float16"), ("version", "pf-kv/9"), ("pages", doc["pages"][:1])):
        bad = dict(doc, **{key: value})
        with pytest.raises(DataError):
            table_mod.decode(json.dumps(bad).encode())
