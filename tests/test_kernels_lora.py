"""git_pf.kernels LoRA: ΔW / refactor rules and merges of real peft adapters."""

from __future__ import annotations

import json
import os
import zlib

import pytest
import torch

from git_pf import kernels as K
from git_pf.kernels import LoraAdapter, lora_delta, merge_lora_adapters, refactor

os.environ.setdefault("HF_HUB_OFFLINE", "1")
peft = pytest.importorskip("peft")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

TARGETS = ["q_proj", "v_proj", "o_proj", "embed_tokens"]
PATTERNS = dict(rank_pattern={"o_proj": 2}, alpha_pattern={"v_proj": 16})


def randn(*shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# --- refactor rules -----------------------------------------------------------------------


def low_rank(m, n, r, seed):
    return randn(m, r, seed=seed) @ randn(r, n, seed=seed + 1)


@pytest.mark.parametrize("exact_max", [1024, 8])  # exact SVD, then the randomized path
def test_refactor_is_exact_when_rank_fits(monkeypatch, exact_max):
    monkeypatch.setattr(K.lora, "EXACT_SVD_MAX", exact_max)
    delta = low_rank(120, 90, 3, seed=0)
    f = refactor(delta, rank=4, scale=2.0, seed=7)
    assert f.A.shape == (4, 90) and f.B.shape == (120, 4)
    assert f.error < 1e-5
    assert torch.allclose(lora_delta(f.A, f.B, 2.0), delta, atol=1e-4)
    again = refactor(delta, rank=4, scale=2.0, seed=7)
    assert torch.equal(f.A, again.A) and torch.equal(f.B, again.B)


@pytest.mark.parametrize("exact_max", [1024, 8])
def test_refactor_error_is_the_svd_tail(monkeypatch, exact_max):
    monkeypatch.setattr(K.lora, "EXACT_SVD_MAX", exact_max)
    delta = randn(80, 60, seed=3)
    s = torch.linalg.svdvals(delta.double())
    optimal = float(s[5:].square().sum().sqrt() / s.square().sum().sqrt())
    f = refactor(delta, rank=5, scale=0.5)
    assert f.error == pytest.approx(optimal, rel=1e-3 if exact_max == 8 else 1e-5)
    assert f.error == pytest.approx(f.residual / f.norm)


def test_refactor_scale_goes_into_B_and_zero_is_zero():
    delta = low_rank(10, 12, 2, seed=5)
    f = refactor(delta, rank=2, scale=4.0)
    assert torch.allclose(f.A @ f.A.T, torch.eye(2), atol=1e-5)  # A rows orthonormal
    assert torch.allclose(f.B @ f.A * 4.0, delta, atol=1e-5)
    z = refactor(torch.zeros(6, 5), rank=3, scale=1.0)
    assert z.error == 0.0 and not z.B.any() and z.A.shape == (3, 5)  # B = 0, as a fresh LoRA


# --- real peft adapters -------------------------------------------------------------------


def base_model():
    cfg = transformers.LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, vocab_size=128)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A real peft adapter: random LoRA weights, save_pretrained, read back from disk."""
    model = peft.get_peft_model(base_model(), peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS, **PATTERNS))
    g = torch.Generator().manual_seed(1)
    for name, p in model.named_parameters():
        if "lora_" in name:
            p.data = torch.randn(p.shape, generator=g) * 0.1
    path = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(path)
    tensors = safetensors_torch.load_file(str(path / "adapter_model.safetensors"))
    config = json.loads((path / "adapter_config.json").read_text())
    return LoraAdapter(tensors, config)


def variant(adapter, seed, only=None, factors=("lora_A", "lora_B", "lora_embedding")):
    """A copy of ``adapter`` with fresh LoRA factors on modules whose key contains ``only``."""
    def fresh(k, v):
        hit = any(f in k for f in factors) and (only is None or only in k)
        return randn(*v.shape, seed=seed + zlib.crc32(k.encode()) % 1000) * 0.1 if hit else v
    return LoraAdapter({k: fresh(k, v) for k, v in adapter.tensors.items()}, adapter.config)


def write_and_load(merged, tmp_path):
    """Write a merged adapter as peft lays it out, load it with PeftModel, run a forward pass."""
    safetensors_torch.save_file(merged.tensors, str(tmp_path / "adapter_model.safetensors"), metadata={"format": "pt"})
    (tmp_path / "adapter_config.json").write_text(json.dumps(merged.config))
    model = peft.PeftModel.from_pretrained(base_model(), str(tmp_path)).eval()
    with torch.no_grad():
        logits = model(torch.arange(16).reshape(2, 8)).logits
    assert logits.shape == (2, 8, 128) and torch.isfinite(logits).all()
    return model


def peft_deltas(model):
    """prefix -> ΔW as peft computes it from the loaded weights (B @ A orientation)."""
    out = {}
    for name, m in model.named_modules():
        if isinstance(m, peft.tuners.lora.LoraLayer) and "default" in m.scaling:
            d = m.get_delta_weight("default")
            out[name] = d.T if "embed" in name else d
    return out


def test_merged_adapter_round_trips_keys_and_loads(saved, tmp_path):
    base, ours, theirs = saved, variant(saved, 10), variant(saved, 20, only="layers.1")
    merged = merge_lora_adapters("ties", [ours, theirs], base, density=0.5, seed=1)
    assert set(merged.tensors) == set(saved.tensors)
    assert all(merged.tensors[k].shape == v.shape and merged.tensors[k].dtype == v.dtype
               for k, v in saved.tensors.items())
    model = write_and_load(merged, tmp_path)
    loaded = peft.get_peft_model_state_dict(model)
    assert set(loaded) == set(merged.tensors)
    assert all(torch.equal(loaded[k], merged.tensors[k]) for k in loaded)
    # what peft rebuilds from the file is B'A'·scale; its distance to the merged ΔW is the reported error
    mods = K.lora_modules(merged.tensors)
    for prefix, delta in peft_deltas(model).items():
        ours_d = K.module_delta(mods[prefix], merged.config)
        assert torch.allclose(delta, ours_d, atol=1e-6), prefix
        sides = [K.module_delta(K.lora_modules(a.tensors)[prefix], a.config) for a in (ours, theirs)]
        _, exact = K.three_way(sides, K.module_delta(K.lora_modules(base.tensors)[prefix], base.config),
                               K.MergeOptions("ties", density=0.5, seed=1), prefix)
        err = float(torch.linalg.matrix_norm(exact - delta) / torch.linalg.matrix_norm(exact))
        assert err == pytest.approx(merged.errors[prefix], rel=1e-3, abs=1e-6), prefix
    assert merged.sources["base_model.model.model.layers.0.self_attn.q_proj"] == 0  # theirs kept layer 0
    assert merged.sources["base_model.model.model.layers.1.self_attn.q_proj"] == "merged"


@pytest.mark.parametrize("method", ["linear", "task_arithmetic", "ties", "dare_linear", "dare_ties"])
def test_three_way_with_one_side_changed_is_that_side(saved, method):
    base, ours = saved, variant(saved, 30)
    for sides in ([ours, base], [base, ours]):
        merged = merge_lora_adapters(method, sides, base, density=0.3, drop=0.5, seed=2)
        assert all(torch.equal(merged.tensors[k], v) for k, v in ours.tensors.items())
        assert merged.error == 0.0


def test_linear_merge_of_an_adapter_with_itself_returns_it(saved):
    merged = merge_lora_adapters("linear", [saved, saved])
    assert all(torch.equal(merged.tensors[k], v) for k, v in saved.tensors.items())
    numeric = merge_lora_adapters("linear", [saved, saved], resolve_trivial=False)
    assert numeric.error < 1e-5
    for prefix, m in K.lora_modules(saved.tensors).items():
        again = K.lora_modules(numeric.tensors)[prefix]
        before, after = K.module_delta(m, saved.config), K.module_delta(again, numeric.config)
        assert torch.allclose(before, after, atol=1e-6), prefix


def test_refactor_error_is_zero_when_merged_delta_fits_the_rank(saved, tmp_path):
    # the sides change only B, so every merged ΔW lies in the base's rank-r row space
    base = saved
    only_b = ("lora_B", "embedding_B")
    ours, theirs = variant(saved, 40, factors=only_b), variant(saved, 50, factors=only_b)
    for method in ("linear", "task_arithmetic"):  # DARE / TIES sparsify entries: full rank
        merged = merge_lora_adapters(method, [ours, theirs], base, drop=0.3, seed=3)
        assert merged.error < 1e-5, method
        assert max(merged.errors.values()) < 1e-5, method
    write_and_load(merged, tmp_path)


def test_rank_override_and_deletion(saved, tmp_path):
    ours, theirs = variant(saved, 60), variant(saved, 70)
    low = merge_lora_adapters("ties", [ours, theirs], saved, density=0.5)
    high = merge_lora_adapters("ties", [ours, theirs], saved, density=0.5, rank=8)
    assert high.config["r"] == 8 and high.config["rank_pattern"] == {}
    assert all(m.rank == 8 for m in K.lora_modules(high.tensors).values())
    assert high.error < low.error
    write_and_load(high, tmp_path)
    q = "base_model.model.model.layers.0.self_attn.q_proj"
    deleted = {k: v for k, v in ours.tensors.items() if not k.startswith(q + ".")}
    out = merge_lora_adapters("ties", [LoraAdapter(deleted, saved.config), saved], saved)
    assert out.sources[q] == "deleted" and not any(k.startswith(q + ".") for k in out.tensors)


def test_adapter_merge_is_deterministic(saved):
    ours, theirs = variant(saved, 80), variant(saved, 90)
    runs = [merge_lora_adapters("dare_ties", [ours, theirs], saved, drop=0.4, seed=5) for _ in range(2)]
    assert all(torch.equal(runs[0].tensors[k], runs[1].tensors[k]) for k in runs[0].tensors)
    other = merge_lora_adapters("dare_ties", [ours, theirs], saved, drop=0.4, seed=6)
    assert any(not torch.equal(runs[0].tensors[k], other.tensors[k]) for k in other.tensors)


def test_dora_adapters_are_refused(saved):
    dora = LoraAdapter(saved.tensors, {**saved.config, "use_dora": True})
    with pytest.raises(ValueError, match="DoRA"):
        merge_lora_adapters("ties", [dora, saved], saved)
