"""KV cache across forks: shared prefix pages are stored once, show counts them, a core command stays torch-free."""
from __future__ import annotations

import json
import multiprocessing
import subprocess
import sys

import torch

from transformers import DynamicCache

import git_pf.layers.cache as kc
from git_pf.layers.cache.table import sharing
from cache_helpers import deterministic_torch, feed, prompt, tiny_llama  # noqa: F401 (autouse fixture)


def test_eight_forks_sharing_ninety_percent_store_shared_pages_once(repo, tmp_path, run_pf):
    model = tiny_llama()
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (sandbox / "task.txt").write_text("explore\n")
    cache = DynamicCache()
    shared = prompt(144, seed=7)  # 9 full pages: 90% of each fork's 160 tokens
    feed(model, cache, shared)
    parent = repo.snapshot(sandbox, name="main", layers=(kc.CacheInput.from_cache(cache, shared, model=model),)).image
    assert sum(1 for _ in repo.store.iter_oids()) == 9

    forks = repo.fork(parent.id, 8)
    for i, fork in enumerate(forks):
        live, tokens = kc.restore(parent.id, repo=repo, model=model)
        suffix = prompt(16, seed=100 + i)  # each fork reads a different tool result
        feed(model, live, suffix)
        inp = kc.CacheInput.from_cache(live, tokens + suffix, model=model)
        image = repo.snapshot(sandbox, name=fork.name, layers=(inp,)).image
        assert inp.new_objects == 1  # only the page of its own 16 tokens is new
        shared = sharing(repo, image)
        assert (shared["tokens"], shared["pages"], shared["shared_pages"]) == (160, 10, 9)
        assert shared["shared_bytes"] == 9 * shared["bytes"] // 10

    objects = sum(1 for _ in repo.store.iter_oids())
    assert objects == 9 + 8  # shared pages once, plus one own page per fork
    # logical bytes kept = 1.7/8 of eight independent copies: the floor for a 90% shared prefix
    tables = [repo.resolve(f.name) for f in forks]
    stored = sum(len(repo.store.get(oid)) for oid in repo.store.iter_oids())
    independent = sum(img.manifest["layers"]["cache"]["bytes"] for img in tables)
    assert stored * 80 == independent * 17

    out = run_pf("show", "--json", forks[0].name, cwd=tmp_path / "repo").stdout
    assert json.loads(out)["cache"]["shared_pages"] == 9
    assert "shared with parent: 9 of 10 pages" in run_pf("show", forks[3].name, cwd=tmp_path / "repo").stdout


CORE_ONLY = """
import sys
from git_pf.cli.app import main
codes = [main(["log", "--oneline"]), main(["show", sys.argv[1]]), main(["show", "--json", sys.argv[1]]),
         main(["snapshot", "--fs-root", sys.argv[2], "--allow-empty", "-q"])]
assert codes == [0, 0, 0, 0], codes
assert "torch" not in sys.modules, "a core command imported torch"
assert "safetensors" not in sys.modules and "transformers" not in sys.modules
"""


def test_core_commands_on_a_cache_image_never_import_torch(repo, tmp_path):
    model = tiny_llama()
    cache = DynamicCache()
    tokens = prompt(20)
    feed(model, cache, tokens)
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    image = repo.snapshot(sandbox, layers=(kc.CacheInput.from_cache(cache, tokens, model=model),)).image
    proc = subprocess.run([sys.executable, "-c", CORE_ONLY, image.id, str(sandbox)], cwd=tmp_path / "repo",
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def _restore_and_snapshot_in_child(repo_dir, rev, sandbox, out):
    """A forked worker: restore the parent's cache, grow it by one token, snapshot it."""
    from git_pf import Repo

    repo = Repo.open(repo_dir)
    cache, tokens = kc.restore(rev, repo=repo, model="fork-worker@1")
    grown = [(torch.cat([layer.keys, layer.keys[..., -1:, :]], -2), torch.cat([layer.values, layer.values[..., -1:, :]], -2))
             for layer in cache.layers]
    image = repo.snapshot(sandbox, name="child", layers=(kc.CacheInput.from_cache(grown, tokens + [7], model="fork-worker@1"),)).image
    out.put((tokens, [layer.keys.numpy().tobytes() for layer in cache.layers], image.id))  # bytes: no shared memory


def test_a_worker_forked_after_its_parent_used_the_cache_restores_and_snapshots(repo, tmp_path):
    """Agents fork worker processes from a parent that has already captured and restored caches.
    The page threads do not survive ``fork``; the child must start its own instead of handing
    work to threads that are not there (it waited for ever)."""
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    g = torch.Generator().manual_seed(3)
    layers = [(torch.randn(1, 2, 40, 8, generator=g), torch.randn(1, 2, 40, 8, generator=g)) for _ in range(2)]
    parent = repo.snapshot(sandbox, name="main", layers=(kc.CacheInput.from_cache(layers, list(range(40)), model="fork-worker@1"),)).image
    kc.restore(parent.id, repo=repo, model="fork-worker@1")  # the parent's page threads now exist

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    child = ctx.Process(target=_restore_and_snapshot_in_child, args=(repo.git_dir, parent.id, sandbox, out))
    child.start()
    try:
        tokens, keys, child_image = out.get(timeout=60)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    assert child.exitcode == 0
    assert tokens == list(range(40))
    assert keys == [k.numpy().tobytes() for k, _ in layers]
    grown, ids = kc.restore(child_image, repo=repo, model="fork-worker@1")
    assert ids == list(range(40)) + [7] and grown.layers[0].keys.shape[-2] == 41
