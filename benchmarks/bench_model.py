"""Model layer speed: capture + restore of a large LoRA adapter, in one run.

    python -m benchmarks.bench_model [--mb 500]

1. ``git pf snapshot --adapter`` of an MB-sized peft-layout adapter (bf16
   LoRA factors of a 32-layer, 4096-wide model, every attention and MLP
   projection, rank chosen to reach the size) into a fresh repository, and
   ``git pf checkout --layers model`` back, in MB/s; against
   ``git hash-object -w`` of the same file (what committing it to git costs)
   and a plain file copy, measured in the same run.
2. A second snapshot after one "training step" that changed 1 of every 16
   tensors: seconds and bytes added to the side store (unchanged tensors are
   stored once).

The adapter file is written once and read from the page cache by every
contender. Prints; never asserts.
"""
from __future__ import annotations

import argparse
import os
import shutil
import time
from pathlib import Path

import numpy as np

from git_pf import Repo
from git_pf.layers.model import stfile
from git_pf.layers.model.layer import ModelInput

from .common import git_env, report, sh, timed, verdict, workdir

LAYERS, HIDDEN, INTER = 32, 4096, 14336
PROJ = {"q_proj": (HIDDEN, HIDDEN), "k_proj": (HIDDEN, 1024), "v_proj": (HIDDEN, 1024), "o_proj": (HIDDEN, HIDDEN),
        "gate_proj": (HIDDEN, INTER), "up_proj": (HIDDEN, INTER), "down_proj": (INTER, HIDDEN)}
PREFIX = "base_model.model.model.layers.{i}.{part}.{name}.lora_{ab}.weight"


def _part(name: str) -> str:
    return "self_attn" if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else "mlp"


def shapes(rank: int) -> list[tuple[str, tuple[int, int]]]:
    out = []
    for i in range(LAYERS):
        for name, (fan_in, fan_out) in PROJ.items():
            fmt = dict(i=i, part=_part(name), name=name)
            out.append((PREFIX.format(ab="A", **fmt), (rank, fan_in)))
            out.append((PREFIX.format(ab="B", **fmt), (fan_out, rank)))
    return sorted(out)


def rank_for(mb: int) -> int:
    per_rank = sum(a * b for _, (a, b) in shapes(1)) * 2  # bf16
    return max(1, round(mb * 1_000_000 / per_rank))


def bf16_bytes(rng: np.random.Generator, n: int) -> bytes:
    """n bf16 values of a small normal distribution (the top halves of float32s)."""
    f = (rng.standard_normal(n, dtype=np.float32) * 0.02).view(np.uint32)
    return (f >> 16).astype(np.uint16).tobytes()


def write_adapter(directory: Path, rank: int, seed: int, changed_every: int = 0, base: Path | None = None) -> int:
    """An adapter in peft layout; with ``base``, a copy whose every ``changed_every``-th tensor differs."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    items = shapes(rank)
    entries = stfile.layout((name, "BF16", shape) for name, shape in items)
    head = stfile.encode_header({"format": "pt"}, entries)
    old = open(base / "adapter_model.safetensors", "rb") if base else None
    with open(directory / "adapter_model.safetensors", "wb") as f:
        f.write(stfile.length_prefix(head) + head)
        for k, e in enumerate(entries):
            if old is not None:
                old.seek(8 + len(head) + e.begin)
                data = old.read(e.size)
                if changed_every and k % changed_every == 0:
                    data = bf16_bytes(rng, e.size // 2)
            else:
                data = bf16_bytes(rng, e.size // 2)
            f.write(data)
    if old:
        old.close()
    cfg = ('{"peft_type": "LORA", "r": %d, "lora_alpha": %d, "target_modules": %s}'
           % (rank, 2 * rank, str(sorted(PROJ)).replace("'", '"')))
    (directory / "adapter_config.json").write_text(cfg)
    return (directory / "adapter_model.safetensors").stat().st_size


def _store_bytes(repo: Repo) -> int:
    return sum(p.stat().st_size for p in repo.store.root.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=500)
    args = ap.parse_args()
    with workdir("model") as tmp:
        rank = rank_for(args.mb)
        size = write_adapter(tmp / "ad", rank, seed=1)
        mb = size / 1e6
        (tmp / "sb").mkdir()
        repo, _ = Repo.init(tmp / "repo")

        t_cap, snap = timed(repo.snapshot, tmp / "sb", model=ModelInput.prepare(tmp / "ad"))
        t_res, _ = timed(repo.checkout, snap.image.id, tmp / "out", layers=("model",))
        same = (tmp / "out" / "adapter_model.safetensors").read_bytes() == (tmp / "ad" / "adapter_model.safetensors").read_bytes()
        stored = _store_bytes(repo)

        sh("git", "init", "-q", tmp / "plain", env=git_env())
        t_git, _ = timed(sh, "git", "hash-object", "-w", tmp / "ad" / "adapter_model.safetensors", cwd=tmp / "plain")
        t_cp, _ = timed(shutil.copyfile, tmp / "ad" / "adapter_model.safetensors", tmp / "copy.safetensors")

        write_adapter(tmp / "ad2", rank, seed=2, changed_every=16, base=tmp / "ad")
        t_cap2, _ = timed(repo.snapshot, tmp / "sb", model=ModelInput.prepare(tmp / "ad2"))
        added = _store_bytes(repo) - stored

        report(f"capture + restore of a {mb:.0f} MB adapter (rank {rank}, {len(shapes(rank))} bf16 tensors, "
               f"{os.cpu_count()} cores)", [
            ("snapshot --adapter", f"{mb / t_cap:.0f} MB/s", f"{t_cap:.2f} s"),
            ("checkout --layers model", f"{mb / t_res:.0f} MB/s", f"{t_res:.2f} s; byte-identical: {same}"),
            ("git hash-object -w (reference)", f"{mb / t_git:.0f} MB/s", f"capture is {t_git / t_cap:.1f}x git; "
                                                                           f"goal >= 1x: {verdict(t_git >= t_cap)}"),
            ("file copy (reference)", f"{mb / t_cp:.0f} MB/s", f"restore is {t_res / t_cp:.1f}x a copy"),
            ("side store on disk", f"{stored / 1e6:.0f} MB", f"{stored / size:.2f}x the file (zstd)"),
        ])
        report("second snapshot after a step that changed 1 in 16 tensors", [
            ("snapshot --adapter", f"{t_cap2:.2f} s", f"{mb / t_cap2:.0f} MB/s of adapter"),
            ("side store added", f"{added / 1e6:.1f} MB", f"{added / stored:.3f}x the first image; "
                                                            f"goal <= 0.1x: {verdict(added <= 0.1 * stored)}"),
        ])


if __name__ == "__main__":
    t0 = time.perf_counter()
    main()
    print(f"\n(total {time.perf_counter() - t0:.1f} s)")
