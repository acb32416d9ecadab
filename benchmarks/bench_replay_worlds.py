"""Replays of one run, one command after another, with the world cache off and on (docs/record.md,
"The world cache").

    python -m benchmarks.bench_replay_worlds [--files 3000] [--repeat 5] [--steps 4]

A run of a small agent (bench_blame's: one chat call per step, each reply written into its world)
is recorded in a world of ``--files`` files, then replayed with ``git pf replay`` as a user does,
``pf.worldCache.maxWorlds`` 0 (each replay checks step 0's world out and removes it, as before the
cache) against 2 (the world a replay leaves is taken back by the next), interleaved ``--repeat``
times, alternating which goes first; one warm-up replay with the cache on first. Prints the median
wall time of each and the ratio, with and without the world check.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from git_pf.testing.fakellm import FakeLLM

from .bench_blame import AGENT, _grid, by_step
from .common import git_env, recorded_run, report, workdir


def replay(root, agent, cache: str, *flags: str) -> float:
    subprocess.run(["git", "config", "pf.worldCache.maxWorlds", cache], cwd=root, check=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "git_pf", "replay", "run", *flags, "--", sys.executable, str(agent)],
                          cwd=root, capture_output=True, text=True)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"replay failed: {proc.stderr}")
    return took


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_replay_worlds")
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    args = ap.parse_args(argv)
    os.environ.update(git_env(), BENCH_STEPS=str(args.steps))
    with workdir("replay-worlds") as base, FakeLLM(by_step(args.steps)) as fake:
        os.environ["TMPDIR"] = str(base)  # the cache of this repository goes with the work directory
        repo, agent = recorded_run(base, AGENT, fake.url, fill=_grid(args.files))
        root = repo.git_dir.parent
        rows = []
        for flags, label in (((), "world checked"), (("--no-world-check",), "no world check")):
            times: dict[str, list[float]] = {"0": [], "2": []}
            replay(root, agent, "2", *flags)  # the cache holds a world
            for r in range(args.repeat):
                for cache in (("0", "2") if r % 2 == 0 else ("2", "0")):
                    times[cache].append(replay(root, agent, cache, *flags))
                    print(f"  {label} round {r + 1} cache {cache}: {times[cache][-1]:.3f} s "
                          f"(load {os.getloadavg()[0]:.1f})", file=sys.stderr)
            off, on = statistics.median(times["0"]), statistics.median(times["2"])
            rows += [(f"{label}: a fresh checkout per replay", f"{off:.3f} s", ""),
                     (f"{label}: the cached world brought back", f"{on:.3f} s", f"{off / on:.2f}x faster")]
    report(f"git pf replay of a {args.steps}-step run in a world of {args.files} files, median of {args.repeat} "
           f"interleaved rounds", rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
