"""Model and cache layers take part in diff and show like the other layers: a changed adapter
tensor and a changed cache page are named by their layer, not listed as other paths."""
from __future__ import annotations

import json

import pytest
from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf.layers.model.layer import ModelInput

from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)
from model_helpers import make_adapter, sandbox, train

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")
TENSOR = "layers.1.self_attn.v_proj.lora_B"


def test_a_changed_adapter_tensor_is_the_model_layers_diff(repo, tmp_path, run_pf):
    ad = make_adapter(tmp_path / "ad")
    repo.snapshot(sandbox(tmp_path), layers=(ModelInput.prepare(adapter=ad),))
    trained = train(ad, tmp_path / "ad2", seed=3, only=TENSOR)
    repo.snapshot(sandbox(tmp_path), layers=(ModelInput.prepare(adapter=trained),))
    d = repo.diff("main~1", "main")
    assert d.model.parts == ["adapter"] and len(d.model.tensors_changed) == 1 and TENSOR in d.model.tensors_changed[0]
    assert d.model.tensors_added == d.model.tensors_removed == [] and d.other == []
    cwd = tmp_path / "repo"
    stat = run_pf("diff", "main~1", "main", "--stat", cwd=cwd).stdout.splitlines()
    assert stat[-1] == "model:   0 added, 1 changed, 0 removed tensors (adapter changed)"
    assert json.loads(run_pf("diff", "main~1", "main", "--json", cwd=cwd).stdout)["model"] == d.model.to_json()
    shown = json.loads(run_pf("show", "main", "--json", cwd=cwd).stdout)
    assert "1 changed" in run_pf("show", "main", cwd=cwd).stdout
    assert shown["model"]["from_parent"]["tensors_changed"] == d.model.tensors_changed


def test_images_without_model_or_cache_diff_as_before(repo, tmp_path):
    repo.snapshot(sandbox(tmp_path))
    repo.snapshot(sandbox(tmp_path, text="changed\n"))
    assert set(repo.diff("main~1", "main").layers) == {"world", "trace", "effects", "env"}


def test_a_cache_page_added_is_the_cache_layers_diff(repo, tmp_path, run_pf):
    model = tiny_llama()
    sb = sandbox(tmp_path)
    cache = DynamicCache()
    tokens = prompt(32, seed=7)  # two pages
    feed(model, cache, tokens)
    repo.snapshot(sb, layers=(kc.CacheInput.from_cache(cache, tokens, model=model),))
    more = prompt(16, seed=8)
    feed(model, cache, more)
    repo.snapshot(sb, layers=(kc.CacheInput.from_cache(cache, tokens + more, model=model),))
    d = repo.diff("main~1", "main")
    assert (d.cache.tokens_before, d.cache.tokens_after, d.cache.pages_added, d.cache.pages_removed) == (32, 48, 1, 0)
    assert d.other == []
    out = run_pf("diff", "main~1", "main", "--stat", cwd=tmp_path / "repo").stdout.splitlines()
    assert out[-1] == "cache:   32 -> 48 tokens, 1 pages added, 0 removed"
