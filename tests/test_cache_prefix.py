"""A context that shares only a prefix with a stored cache: restore just that prefix (reading only
its pages), run the rest on it, and find which image holds the longest prefix."""
from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf.layers.cache.table import read
from git_pf.core.errors import MissingObject
from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)


def _snapshot(repo, tmp_path, model, tokens, name=None):
    cache = DynamicCache()
    feed(model, cache, tokens)
    sandbox = tmp_path / "sb"
    sandbox.mkdir(exist_ok=True)
    image = repo.snapshot(sandbox, name=name, layers=(kc.CacheInput.from_cache(cache, tokens, model=model),)).image
    return image, cache


def _bits(t):
    return t.contiguous().view(torch.int32)


def test_a_context_that_parts_mid_page_restores_its_common_prefix_and_runs_on_bit_exactly(repo, tmp_path):
    model = tiny_llama()
    stored = prompt(45, seed=3)  # pages [0, 16), [16, 32), [32, 45)
    image, original = _snapshot(repo, tmp_path, model, stored)
    context = stored[:20] + prompt(9, seed=4)  # parts from the stored tokens inside the second page
    assert context[20] != stored[20]

    # the last page is not needed: take its object away, and the prefix still restores
    last = read(repo, image.tree).pages[-1].sha256
    repo.store.path_for(last).unlink()
    cache, ids = kc.restore(image.id, repo=repo, model=model, tokens=context)
    assert ids == stored[:20] and cache.get_seq_length() == 20
    for got, want in zip(cache.layers, original.layers):
        assert torch.equal(_bits(got.keys), _bits(want.keys[..., :20, :]))
        assert torch.equal(_bits(got.values), _bits(want.values[..., :20, :]))

    # running the rest of the context on it gives what running it on the original cache cut
    # to the same prefix gives, logit for logit
    original.crop(20 - len(stored))  # transformers: a negative count of tokens to remove
    assert torch.equal(feed(model, cache, context[20:]), feed(model, original, context[20:]))

    with pytest.raises(kc.CacheMismatch):
        kc.restore(image.id, repo=repo, model="another-model@1", tokens=context)
    with pytest.raises(MissingObject):  # the whole cache needs the page taken away
        kc.restore(image.id, repo=repo, model=model)


def test_a_context_sharing_no_tokens_gets_an_empty_cache(repo, tmp_path):
    model = tiny_llama()
    image, _ = _snapshot(repo, tmp_path, model, prompt(20, seed=3))
    context = prompt(12, seed=8)
    cache, ids = kc.restore(image.id, repo=repo, model=model, tokens=context)
    assert ids == [] and cache.get_seq_length() == 0
    assert torch.equal(feed(model, cache, context), feed(model, DynamicCache(), context))


def test_the_image_holding_the_longest_prefix_is_found_among_forks(repo, tmp_path):
    model = tiny_llama()
    shared = prompt(32, seed=3)
    _snapshot(repo, tmp_path, model, shared, name="parent")
    a, b = prompt(10, seed=11), prompt(10, seed=12)
    _snapshot(repo, tmp_path, model, shared + a, name="fork-a")
    fork_b, _ = _snapshot(repo, tmp_path, model, shared + b, name="fork-b")
    context = shared + b[:5] + prompt(7, seed=13)

    found = kc.longest_prefix(context, repo=repo, model=model)
    assert found.image.id == fork_b.id and found.tokens == 37 and found.ref == "refs/pf/heads/fork-b"
    cache, ids = kc.restore(found.image.id, repo=repo, model=model, tokens=context)
    assert ids == context[:37]

    assert kc.longest_prefix(shared[:20], repo=repo, model=model).tokens == 20
    assert kc.longest_prefix(context, repo=repo, model="another-model@1").image is None
    assert kc.longest_prefix(context, repo=repo, model=model, adapter="lora-x").image is None
