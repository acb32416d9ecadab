"""KV cache: capture, snapshot through the CLI, restore in a fresh process, decode on bit-exactly."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from transformers import DynamicCache

import git_pf.layers.cache as kc
from cache_helpers import deterministic_torch, decode, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)

HERE = Path(__file__).parent

RESTORE_AND_DECODE = textwrap.dedent("""
    import json, sys, torch
    sys.path.insert(0, sys.argv[1])
    from cache_helpers import decode, tiny_llama
    import git_pf.cache as kc
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    from git_pf import Repo
    repo_dir, rev, first, steps, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6]
    model = tiny_llama()
    repo = Repo.open(repo_dir)
    cache, tokens = kc.restore(rev, repo=repo, model=model)
    from git_pf.layers.cache.table import read
    table = read(repo, repo.resolve(rev).tree)
    again = kc.capture(cache, tokens, model=model, page_tokens=table.layout.page_tokens).table
    fed, logits = decode(model, cache, first, steps)
    torch.save({"tokens": tokens, "fed": fed, "logits": torch.stack(logits),
                "rehash_equal": again.to_json() == table.to_json(),
                "page_hashes": [p.sha256 for p in again.pages]}, out)
""")


def test_restore_in_fresh_process_decodes_bitwise_equal(tmp_path, repo, run_pf):
    model = tiny_llama()
    cache = DynamicCache()
    tokens = prompt(37)
    first_logits = feed(model, cache, tokens)
    fed, logits = decode(model, cache, int(first_logits.argmax()), 6)
    tokens += fed
    pending = int(logits[-1].argmax())  # decided on, not yet fed: both runs continue from it
    kv_file = kc.save(tmp_path / "kv.safetensors", cache, tokens, model=model)

    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (sandbox / "notes.txt").write_text("hi\n")
    image = run_pf("snapshot", "--fs-root", sandbox, "--kv", kv_file, "-q", cwd=tmp_path / "repo").stdout.strip()

    # The uninterrupted run goes on from the live cache.
    ref_fed, ref_logits = decode(model, cache, pending, 12)

    out = tmp_path / "restored.pt"
    subprocess.run([sys.executable, "-c", RESTORE_AND_DECODE, str(HERE), str(tmp_path / "repo"), image,
                    str(pending), "12", str(out)], check=True, env=dict(os.environ, HF_HUB_OFFLINE="1"))
    got = torch.load(out)
    assert got["tokens"] == tokens
    assert got["fed"] == ref_fed
    ref = torch.stack(ref_logits)
    assert got["logits"].dtype == ref.dtype and got["logits"].shape == ref.shape
    assert got["logits"].view(torch.int32).equal(ref.view(torch.int32))  # bitwise, not allclose
    assert got["rehash_equal"], "restored K/V bytes must hash to the stored page hashes"

    show = json.loads(run_pf("show", "--json", image, cwd=tmp_path / "repo").stdout)
    summary = show["manifest"]["layers"]["cache"]
    assert summary["tokens"] == len(tokens) == 43 and summary["pages"] == 3
    assert summary["bytes"] == 43 * 2 * 2 * (2 * 16) * 4  # tokens x layers x (K,V) x (heads x dim) x fp32
    assert show["cache"]["shared_pages"] == 0 and show["cache"]["tokens"] == 43
    text = run_pf("show", image, cwd=tmp_path / "repo").stdout
    assert "tokens=43" in text and "pages=3" in text and "shared with parent: 0 of 3 pages" in text


def test_restore_in_process_matches_capture_tensor_for_tensor(repo, tmp_path):
    model = tiny_llama()
    cache = DynamicCache()
    tokens = prompt(33, seed=5)  # 2 full pages of 16 and a partial page of 1
    feed(model, cache, tokens)
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    result = repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(cache, tokens, model=model),))
    restored, got_tokens = kc.restore(result.image.id, repo=repo, model=model)
    assert got_tokens == tokens
    assert len(restored.layers) == len(cache.layers)
    for a, b in zip(cache.layers, restored.layers):
        assert a.keys.shape == b.keys.shape and a.keys.stride() == b.keys.stride()
        assert torch.equal(a.keys.view(torch.int32), b.keys.view(torch.int32))
        assert torch.equal(a.values.view(torch.int32), b.values.view(torch.int32))
    # the plain-dict form captures to the very same table
    as_dict = {i: (layer.keys, layer.values) for i, layer in enumerate(cache.layers)}
    assert kc.capture(as_dict, tokens, model=model).table == kc.capture(cache, tokens, model=model).table


def test_checkout_cache_layer_writes_interchange_file(tmp_path, repo, run_pf):
    model = tiny_llama()
    cache = DynamicCache()
    tokens = prompt(20, seed=3)
    feed(model, cache, tokens)
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(cache, tokens, model="tiny@v1"),)).image
    into = tmp_path / "out"
    run_pf("checkout", image.id, "--layers", "cache", "--into", into, cwd=tmp_path / "repo")
    assert sorted(p.name for p in into.iterdir()) == ["kv.safetensors", "pages.json"]
    kv = kc.load(into / "kv.safetensors")
    assert kv.tokens == tokens and kv.model == "tiny@v1" and kv.adapter is None
    for (k, v), layer in zip(kv.layers, cache.layers):
        assert torch.equal(k, layer.keys) and torch.equal(v, layer.values)
    assert (into / "pages.json").read_bytes() == repo.read_layer(image.id, "cache/pages.json")
