"""``git pf snapshot --kv`` and ``checkout --layers cache``: user mistakes give one line and no image."""
from __future__ import annotations

from safetensors.torch import save_file
import torch
from transformers import DynamicCache

import git_pf.layers.cache as kc
from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)


def _one_line_error(proc, code: int, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for w in words:
        assert w in lines[0], lines[0]


def test_snapshot_kv_mistakes_write_no_image(tmp_path, repo, run_pf):
    cwd = tmp_path / "repo"
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (tmp_path / "junk.safetensors").write_bytes(b"not a safetensors file")
    save_file({"x": torch.zeros(2)}, str(tmp_path / "foreign.safetensors"))
    cache = DynamicCache()
    tokens = prompt(18)
    feed(tiny_llama(), cache, tokens)
    good = kc.save(tmp_path / "kv.safetensors", cache, tokens, model="tiny@1")

    _one_line_error(run_pf("snapshot", "--fs-root", sandbox, "--kv", tmp_path / "nope", cwd=cwd, check=False),
                    2, "--kv", "does not exist")
    _one_line_error(run_pf("snapshot", "--fs-root", sandbox, "--kv", tmp_path / "junk.safetensors", cwd=cwd,
                           check=False), 2, "--kv", "junk.safetensors")
    _one_line_error(run_pf("snapshot", "--fs-root", sandbox, "--kv", tmp_path / "foreign.safetensors", cwd=cwd,
                           check=False), 2, "pf-kv/1")
    _one_line_error(run_pf("snapshot", "--fs-root", sandbox, "--kv", good, "--model-fingerprint", "other@2",
                           cwd=cwd, check=False), 2, "other@2", "tiny@1")
    _one_line_error(run_pf("snapshot", "--fs-root", sandbox, "--model-fingerprint", "x", cwd=cwd, check=False),
                    2, "--kv")
    assert repo.log() == [] and not list(repo.store.iter_oids())

    first = run_pf("snapshot", "--fs-root", sandbox, "--kv", good, "--kv-page-tokens", "8", "-q", cwd=cwd).stdout
    again = run_pf("snapshot", "--fs-root", sandbox, "--kv", good, "--kv-page-tokens", "8", cwd=cwd)
    assert again.stdout == first and "nothing changed" in again.stderr
    assert repo.resolve("HEAD").manifest["layers"]["cache"]["pages"] == 3  # 18 tokens in pages of 8


def test_checkout_cache_of_image_without_cache_is_a_usage_error(tmp_path, repo, run_pf):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox).image
    proc = run_pf("checkout", image.id, "--layers", "cache", "--into", tmp_path / "out", cwd=tmp_path / "repo",
                  check=False)
    _one_line_error(proc, 2, "no KV cache")
    assert not (tmp_path / "out").exists()
