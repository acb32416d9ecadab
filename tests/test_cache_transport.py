"""KV pages travel with their images (push, clone, lazy fetch), survive gc, are checked by fsck,
and ``git pf merge`` runs the cache merger."""
from __future__ import annotations

import json

from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf import Repo
from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)
from transport_helpers import origin_of, pf


def _kv_file(tmp_path, name, tokens, model):
    cache = DynamicCache()
    feed(model, cache, tokens)
    return kc.save(tmp_path / name, cache, tokens, model="tiny@1")


def test_pages_push_clone_checkout_gc_and_fsck(tmp_path):
    model = tiny_llama()
    kv = _kv_file(tmp_path, "kv.safetensors", prompt(40), model)
    sb = tmp_path / "sb"
    sb.mkdir()
    a = tmp_path / "a"
    pf("init", a, cwd=tmp_path)
    pf("snapshot", "--fs-root", sb, "--kv", kv, cwd=a)
    remote = origin_of(a, tmp_path)
    pushed = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    assert pushed["sent_objects"] == 3  # three pages
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    pf("checkout", "main", "--layers", "cache", "--into", tmp_path / "out", cwd=b)  # pages fetched lazily
    got, want = kc.load(tmp_path / "out" / "kv.safetensors"), kc.load(kv)
    assert got.tokens == want.tokens and all(
        g.equal(w) for gl, wl in zip(got.layers, want.layers) for g, w in zip(gl, wl))
    for repo_dir in (a, b):
        assert json.loads(pf("gc", "--prune=now", "--json", cwd=repo_dir).stdout)["removed"] == []
        assert pf("fsck", cwd=repo_dir).returncode == 0

    c = tmp_path / "c"  # no remote: a missing page cannot be fetched later
    repo, _ = Repo.init(c)
    repo.snapshot(sb, layers=(kc.CacheInput.from_file(kv),))
    victim = next(iter(repo.store.iter_oids()))
    repo.store.remove(victim)
    proc = pf("fsck", cwd=c, check=False)
    assert proc.returncode == 1 and "cache" in proc.stdout + proc.stderr and victim in proc.stdout + proc.stderr


def test_git_pf_merge_keeps_pages_that_prefix_the_merged_trace(tmp_path):
    model = tiny_llama()
    base_tokens = prompt(40)
    sb = tmp_path / "sb"
    sb.mkdir()
    repo_dir = tmp_path / "a"
    repo, _ = Repo.init(repo_dir)
    msgs = [{"role": "user", "content": "task"}]

    def snap(branch, messages, tokens):
        cache = DynamicCache()
        feed(model, cache, tokens)
        layer = kc.CacheInput.from_cache(cache, tokens, model="tiny@1")
        repo.snapshot(sb, name=branch, messages=messages, layers=(layer,))

    snap("main", msgs, base_tokens)
    repo.create_branch("other", "main")
    snap("main", msgs + [{"role": "assistant", "content": "ours"}], base_tokens + prompt(10, seed=2))
    snap("other", msgs + [{"role": "assistant", "content": "theirs"}], base_tokens + prompt(30, seed=3))
    proc = pf("merge", "other", "--into", "main", "--json", cwd=repo_dir, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    text = json.dumps(out)
    assert '"kept_from": "ours"' in text and '"dropped_pages": 3' in text, text
    repo = Repo.open(repo_dir)
    merged = repo.resolve("main")
    assert len(merged.parents) == 2
    assert repo.read_layer("main", "cache/pages.json") == repo.read_layer("main^1", "cache/pages.json")
    assert merged.manifest["layers"]["cache"]["tokens"] == 50
