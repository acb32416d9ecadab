"""TIES merge kernel (git_pf.kernels) against mergekit's TIES on the same inputs, in one run.

    python -m benchmarks.bench_kernels [--tensors 6] [--dim 4096] [--density 0.3] [--threads N]

Three task vectors of TENSORS fp32 DIM x DIM tensors each (6 x 4096 x 4096 =
100.7M parameters per vector, 1.2 GB of inputs in all), merged with TIES at
DENSITY, weights 1.0 / 0.7 / 0.5, by both implementations with mergekit's
conventions (sign elected on the weighted sum, mean weighted by the agreeing
weights), so their outputs must agree. mergekit runs through its public
merge-method API (``registry.get("ties")`` on a TensorGroup per tensor, with a
zero-stride zero base so the base costs no memory).

Each implementation runs in its own process: inputs are generated there from
fixed seeds, peak memory is ru_maxrss after the merge minus ru_maxrss before
the inputs were made (so interpreter and libraries are excluded; inputs and
outputs are included), and time is wall and CPU time of the merge call. The
outputs are written to a temporary safetensors file and compared tensor by
tensor. Goals: >= 5x faster than mergekit, peak <= 1.5x the inputs (inputs
plus the one output alone are 1.33x). The machine's CPU pressure (PSI) is
printed: other tenants inflate wall time, CPU time less so.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

from .common import report, verdict, workdir

WEIGHTS = [1.0, 0.7, 0.5]


def _maxrss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _input(torch, i: int, j: int, dim: int):
    """Tensor j of task vector i (fixed seed)."""
    return torch.randn(dim, dim, generator=torch.Generator().manual_seed(1000 * i + j))


def _inputs(torch, tensors: int, dim: int) -> list[dict]:
    return [{f"layers.{j}.weight": _input(torch, i, j, dim) for j in range(tensors)} for i in range(3)]


def _ours(deltas: list[dict], density: float) -> dict:
    from git_pf.kernels import merge_deltas
    return merge_deltas("ties", deltas, weights=WEIGHTS, density=density, elect="weighted", normalize="weight")


def _mergekit(deltas: list[dict], density: float) -> dict:
    import torch
    from mergekit.merge_methods import registry
    from mergekit.merge_methods.base import TensorGroup

    ties, out = registry.get("ties"), {}
    for name, head in deltas[0].items():
        base = torch.zeros((), dtype=head.dtype).expand(head.shape)
        group = TensorGroup.from_tensors([base] + [d[name] for d in deltas], base_index=0)
        out[name] = ties([group], parameters={"weight": WEIGHTS, "density": density})[0]
    return out


def worker(args) -> None:
    import torch
    from safetensors.torch import save_file

    if args.threads:
        torch.set_num_threads(args.threads)
    run = {"ours": _ours, "mergekit": _mergekit}[args.worker]
    run([{"w": torch.ones(8, 8)} for _ in range(3)], 0.5)  # warm up imports and lazy init
    rss0 = _maxrss()
    deltas = _inputs(torch, args.tensors, args.dim)
    rss1 = _maxrss()
    t0, c0 = time.perf_counter(), time.process_time()
    out = run(deltas, args.density)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _maxrss() - rss0
    save_file({k: v.contiguous() for k, v in out.items()}, args.save)
    inputs = sum(t.numel() * t.element_size() for d in deltas for t in d.values())
    print(json.dumps(dict(wall=wall, cpu=cpu, peak=peak, loaded=rss1 - rss0, inputs=inputs,
                          threads=torch.get_num_threads())))


def _spawn(impl: str, args, save: Path) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.bench_kernels", "--worker", impl, "--save", str(save),
           "--tensors", str(args.tensors), "--dim", str(args.dim), "--density", str(args.density),
           "--threads", str(args.threads)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{impl} worker failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _on_ties(torch, j: int, args):
    """Where some input of tensor j sits exactly on its trim threshold (a tie)."""
    from git_pf.kernels import keep_count, kth_largest_abs
    tied = None
    for i in range(3):
        mag = _input(torch, i, j, args.dim).abs_()
        hit = mag == kth_largest_abs(mag, keep_count(args.density, mag.numel())).value
        tied = hit if tied is None else tied | hit
    return tied


def _compare(a: Path, b: Path, args) -> tuple[float, int]:
    """(max |a - b| off tied thresholds, elements differing on tied thresholds).

    Elements tied on a trim threshold (equal |x|) are kept in index order by
    git_pf.kernels and in argsort order by mergekit, so there the two may differ.
    """
    import torch
    from safetensors import safe_open
    worst, on_ties = 0.0, 0
    with safe_open(str(a), "pt") as fa, safe_open(str(b), "pt") as fb:
        for key in fa.keys():
            diff = (fa.get_tensor(key) - fb.get_tensor(key)).abs_()
            if diff.max() > 1e-6:
                tied = _on_ties(torch, int(key.split(".")[1]), args)
                on_ties += int((diff[tied] > 1e-6).sum())
                diff[tied] = 0
            worst = max(worst, float(diff.max()))
    return worst, on_ties


def _cpu_pressure() -> str:
    try:
        return Path("/proc/pressure/cpu").read_text().splitlines()[0]
    except OSError:
        return "n/a"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tensors", type=int, default=6)
    ap.add_argument("--dim", type=int, default=4096)
    ap.add_argument("--density", type=float, default=0.3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--worker", choices=["ours", "mergekit"], help=argparse.SUPPRESS)
    ap.add_argument("--save", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    with workdir("kernels") as tmp:
        print(f"cpu pressure before: {_cpu_pressure()}", flush=True)
        ours = _spawn("ours", args, tmp / "ours.safetensors")
        theirs = _spawn("mergekit", args, tmp / "mergekit.safetensors")
        print(f"cpu pressure after:  {_cpu_pressure()}", flush=True)
        diff, on_ties = _compare(tmp / "ours.safetensors", tmp / "mergekit.safetensors", args)
    gib, params = 2**30, ours["inputs"] // 4 // 3
    ratio = lambda r: r["peak"] / r["inputs"]  # noqa: E731
    speed = theirs["wall"] / ours["wall"]
    report(f"TIES, 3 x {params / 1e6:.1f}M fp32 params ({ours['inputs'] / gib:.2f} GiB in), "
           f"density {args.density}, {ours['threads']} torch thread(s) (git_pf.kernels: 1 in its block loops)", [
        ("git_pf.kernels wall / cpu", f"{ours['wall']:.2f} s / {ours['cpu']:.2f} s", ""),
        ("mergekit wall / cpu", f"{theirs['wall']:.2f} s / {theirs['cpu']:.2f} s", ""),
        ("speed-up (wall)", f"{speed:.1f}x", f"goal >= 5x: {verdict(speed >= 5)}"),
        ("speed-up (cpu)", f"{theirs['cpu'] / ours['cpu']:.1f}x", ""),
        ("git_pf.kernels peak", f"{ours['peak'] / gib:.2f} GiB = {ratio(ours):.2f}x in",
         f"goal <= 1.5x: {verdict(ratio(ours) <= 1.5)}"),
        ("mergekit peak", f"{theirs['peak'] / gib:.2f} GiB = {ratio(theirs):.2f}x in", ""),
        ("max |ours - mergekit| off ties", f"{diff:.3g}", verdict(diff <= 1e-6)),
        ("elements differing on ties", f"{on_ties}", "tie order: index (ours) vs argsort"),
    ])


if __name__ == "__main__":
    main()
