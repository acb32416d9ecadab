"""KV-cache layer speed and storage against safetensors, in one run.

    python -m benchmarks.bench_cache [--gib 1] [--fork-tokens 1280]

1. Capture + restore of GIB of fp16 pages (a Llama-3-8B-like layout: 32
   layers, 8 KV heads of dim 128, 128 KiB per token) through a real snapshot
   into a side store and back into a DynamicCache, against
   ``safetensors.torch.save_file`` + ``load_file`` of the same tensors (the
   loaded tensors are read once, so lazy mapping is not counted as free).
   Goal: within 1.5x, hashing included.
2. 8 forks whose caches share a 90% prefix with their parent: side-store bytes
   on disk against 8 independent safetensors copies. Goal: <= 0.2x.
"""
from __future__ import annotations

import argparse
import os
import time

import torch
from safetensors.torch import load_file, save_file

import git_pf.cache as kc
from git_pf import Repo

from .common import report, timed, verdict, workdir

LAYERS, HEADS, DIM = 32, 8, 128
TOKEN_BYTES = LAYERS * 2 * HEADS * DIM * 2  # K and V, fp16
MODEL = "bench-llama@1"


def kv(tokens: int, seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    return [(torch.randn(1, HEADS, tokens, DIM, generator=g).half(), torch.randn(1, HEADS, tokens, DIM, generator=g).half())
            for _ in range(LAYERS)]


def as_dict(layers) -> dict[str, torch.Tensor]:
    out = {}
    for i, (k, v) in enumerate(layers):
        out[f"layers.{i}.keys"], out[f"layers.{i}.values"] = k, v
    return out


def touch(tensors) -> None:
    for t in tensors:
        t.view(-1)[:: 2048].sum()  # reads one element in every 4 KiB of memory


class Clock:
    """Wall and CPU time (all threads) of one phase; CPU time is what a busy machine cannot inflate."""

    def __enter__(self):
        self.w0, self.c0 = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc):
        self.wall, self.cpu = time.perf_counter() - self.w0, time.process_time() - self.c0


def du(path) -> int:
    total = 0
    for dirpath, _, files in os.walk(path):
        total += sum(os.lstat(os.path.join(dirpath, f)).st_blocks * 512 for f in files)
    return total


def evict(paths) -> None:
    """Write back and drop these files from the page cache, so the next read comes from disk."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def store_files(repo) -> list:
    return [repo.store.path_for(oid) for oid in repo.store.iter_oids()]


def warm_up(path) -> None:
    """One tiny capture and restore first, so imports and thread pools are not timed."""
    repo, _ = Repo.init(path)
    (path / "sb").mkdir()
    image = repo.snapshot(path / "sb", layers=(kc.CacheInput.from_cache(kv(4, 0), list(range(4)), model=MODEL),)).image
    kc.restore(image.id, repo=repo, model=MODEL)


def bench_speed(base, gib: float) -> list:
    tokens = int(gib * 2**30) // TOKEN_BYTES
    layers = kv(tokens, 1)
    ids = list(range(tokens))
    nbytes = tokens * TOKEN_BYTES

    ref = base / "ref.safetensors"
    with Clock() as save:
        save_file(as_dict(layers), str(ref))
    with Clock() as load:
        touch(load_file(str(ref)).values())
    with Clock() as sync:  # what the side store does for every object: make it durable
        evict([ref])
    with Clock() as load_cold:
        touch(load_file(str(ref)).values())

    repo, _ = Repo.init(base / "pf")
    (base / "sb").mkdir()
    warm_up(base / "warm")
    with Clock() as page:
        inp = kc.CacheInput.from_cache(layers, ids, model=MODEL)
    with Clock() as store:
        image = repo.snapshot(base / "sb", layers=(inp,)).image
    del inp
    with Clock() as restore:
        cache, got = kc.restore(image.id, repo=repo, model=MODEL)
        touch(t for layer in cache.layers for t in (layer.keys, layer.values))
    exact = got == ids and all(torch.equal(a.view(torch.int16), l.keys.view(torch.int16)) and
                               torch.equal(b.view(torch.int16), l.values.view(torch.int16))
                               for (a, b), l in zip(layers, cache.layers))
    del cache
    evict(store_files(repo))
    with Clock() as restore_cold:
        kc.restore(image.id, repo=repo, model=MODEL)

    ours = page.wall + store.wall + restore.wall
    warm = ours / (save.wall + load.wall)
    durable = (page.wall + store.wall + restore_cold.wall) / (save.wall + sync.wall + load_cold.wall)
    cpu = (page.cpu + store.cpu + restore.cpu) / (save.cpu + load.cpu)

    def row(name, c):
        return (name, f"{c.wall:.2f} s", f"{nbytes / c.wall / 2**20:,.0f} MiB/s wall, {c.cpu:.2f} s CPU")

    return [
        ("KV bytes", f"{nbytes / 2**30:.2f} GiB", f"{tokens} tokens, {image.manifest['layers']['cache']['pages']} pages"),
        row("safetensors save_file (page cache)", save),
        row("safetensors fsync", sync),
        row("safetensors load_file + read, warm", load),
        row("safetensors load_file + read, cold", load_cold),
        row("pf capture: page + sha256", page),
        row("pf capture: store (zstd, fsync) + image", store),
        row("pf restore, verified, warm", restore),
        row("pf restore, verified, cold", restore_cold),
        ("restored bit-exact", str(exact), verdict(exact)),
        ("ratio, warm (st: no fsync)", f"{warm:.2f}x", f"goal <= 1.5x: {verdict(warm <= 1.5)}"),
        ("ratio, durable + cold read", f"{durable:.2f}x", f"goal <= 1.5x: {verdict(durable <= 1.5)}"),
        ("ratio, CPU time, warm", f"{cpu:.2f}x", ""),
    ]


def bench_forks(base, fork_tokens: int) -> list:
    prefix = (fork_tokens * 9 // 10) // 16 * 16
    parent = kv(prefix, 2)
    repo, _ = Repo.init(base / "forks")
    (base / "sb2").mkdir()
    head = repo.snapshot(base / "sb2", layers=(kc.CacheInput.from_cache(parent, list(range(prefix)), model=MODEL),)).image
    copies = base / "copies"
    copies.mkdir()
    for i, fork in enumerate(repo.fork(head.id, 8)):
        live, ids = kc.restore(head.id, repo=repo, model=MODEL)
        own = kv(fork_tokens - prefix, 100 + i)
        layers = [(torch.cat([l.keys, k], -2), torch.cat([l.values, v], -2)) for l, (k, v) in zip(live.layers, own)]
        ids = ids + [100_000 + i * 1000 + j for j in range(fork_tokens - prefix)]
        repo.snapshot(base / "sb2", name=fork.name, layers=(kc.CacheInput.from_cache(layers, ids, model=MODEL),))
        save_file(as_dict(layers), str(copies / f"fork{i}.safetensors"))
    store, indep = du(repo.store.root), du(copies)
    ratio = store / indep
    logical = (prefix + 8 * (fork_tokens - prefix)) / (8 * fork_tokens)
    return [
        ("tokens per fork / shared prefix", f"{fork_tokens} / {prefix}", f"{prefix / fork_tokens:.0%} shared"),
        ("8 independent safetensors copies", f"{indep / 2**20:,.1f} MiB", "on disk"),
        ("side store (parent + 8 forks)", f"{store / 2**20:,.1f} MiB", "on disk, zstd"),
        ("store / copies", f"{ratio:.3f}x", f"goal <= 0.2x: {verdict(ratio <= 0.2)}"),
        ("floor without compression", f"{logical:.3f}x", "(prefix + 8 suffixes) / 8 copies"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--fork-tokens", type=int, default=1280)
    args = ap.parse_args()
    torch.set_num_threads(os.cpu_count() or 1)
    with workdir("cache") as base:
        report("KV capture + restore vs safetensors", bench_speed(base, args.gib))
    with workdir("cache-forks") as base:
        report("KV storage of 8 forks sharing 90%", bench_forks(base, args.fork_tokens))


if __name__ == "__main__":
    main()
