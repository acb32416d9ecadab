"""KV cache merge: pages that still prefix the merged trace stay, the rest are dropped and reported."""
from __future__ import annotations

import importlib

import pytest
from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf.layers.cache.table import PATH, object_refs, read
from git_pf.image.tree import lookup
from git_pf.merge.layer import PLUGINS, MergeContext
from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)

MSG = [{"role": "user", "content": "task"}]


@pytest.fixture(scope="module")
def model():
    return tiny_llama()


def _image(repo, sandbox, branch, model, messages, tokens):
    cache = DynamicCache()
    feed(model, cache, tokens)
    layers = (kc.CacheInput.from_cache(cache, tokens, model="tiny@1"),)
    return repo.snapshot(sandbox, name=branch, messages=messages, layers=layers).image


def _merger():
    module, _, cls = PLUGINS["cache"].partition(":")
    return getattr(importlib.import_module(module), cls)()


@pytest.fixture
def three(repo, tmp_path, model):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    base_tokens = prompt(40, seed=1)
    base = _image(repo, sandbox, "main", model, MSG, base_tokens)
    repo.create_branch("other", base.id)
    ours_msgs = MSG + [{"role": "assistant", "content": "ours"}]
    theirs_msgs = MSG + [{"role": "assistant", "content": "theirs, a longer answer"}]
    ours = _image(repo, sandbox, "main", model, ours_msgs, base_tokens + prompt(10, seed=2))
    theirs = _image(repo, sandbox, "other", model, theirs_msgs, base_tokens + prompt(30, seed=3))
    return base, ours, theirs, ours_msgs, theirs_msgs


def test_merge_keeps_ours_pages_when_merged_trace_extends_ours(repo, three):
    base, ours, theirs, ours_msgs, _ = three
    merged = ours_msgs + [{"role": "user", "content": "merged the other branch: theirs, a longer answer"}]
    res = _merger().merge(MergeContext(repo, base, ours, theirs, merged_messages=merged))
    assert res.clean and not res.conflicts
    assert res.changes[PATH] == lookup(repo.git, bytes.fromhex(ours.tree), PATH)
    r = res.report
    assert (r["kept_from"], r["kept_tokens"], r["kept_pages"]) == ("ours", 50, 4)
    # theirs' 70 tokens: pages 0-1 are the shared base prefix (kept); pages 2-4 (38 tokens) go,
    # and ours' own pages are all kept
    assert (r["dropped_pages"], r["dropped_tokens"]) == (3, 38)
    assert r["reprefill_tokens_estimate"] > 0
    assert res.summary["tokens"] == 50 and res.summary["pages"] == 4
    assert "cache kept 4 pages from ours" in res.trailer


def test_merge_falls_back_to_base_pages_when_only_base_prefixes(repo, three):
    base, ours, theirs, _, _ = three
    rewritten = MSG + [{"role": "assistant", "content": "a summary of both"}]
    res = _merger().merge(MergeContext(repo, base, ours, theirs, merged_messages=rewritten))
    assert res.report["kept_from"] == "base" and res.report["kept_tokens"] == 40
    assert res.changes[PATH] == lookup(repo.git, bytes.fromhex(base.tree), PATH)


def test_merge_drops_every_page_when_no_trace_prefixes(repo, three):
    base, ours, theirs, _, _ = three
    res = _merger().merge(MergeContext(repo, base, ours, theirs, merged_messages=[{"role": "system", "content": "x"}]))
    assert res.clean and res.changes == {PATH: None}
    assert res.report["kept_pages"] == 0 and res.summary["pages"] == 0
    assert res.report["dropped_pages"] == len({p.id for side in (ours, theirs) for p in read(repo, side.tree).pages})


def test_object_refs_names_every_page(repo, three):
    _, ours, _, _, _ = three
    oids = object_refs(repo.git, ours.tree)
    assert oids == [p.sha256 for p in read(repo, ours.tree).pages] and all(repo.store.has(o) for o in oids)
