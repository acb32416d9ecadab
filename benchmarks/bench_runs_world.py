"""Runs from step 0 and the world check (docs/record.md, "The world check"): what they cost.

    python -m benchmarks.bench_runs_world [--steps 20] [--fork-at 18] [--files 5000] [-k 2]

1. The cost of starting a run from step 0 (the prefix replayed: the agent redoes steps 1..N-1 from
   the tape, its world checked at each) against starting it in step N's world (``--resume-world``):
   a 20-step agent whose tool takes no time (it appends a line to a file), forked at step 18, run on
   through the Python API (``git_pf.runs.runon.run``). The agent does not read its log back, so
   both starts run through (started in step N's world, its log holds the prefix twice). Goal: under 2x.
2. The world check per step on a 5,000-file world: one file changed between two looks, the capture
   a check makes (stat cache and directory watcher) timed. Goal: at most 5 ms a step.
3. Blame trials per minute on the same agent, trials from step 0 against trials started in the fork
   step's world (the old behaviour, only right for an agent whose tools are idempotent; this one's
   is not, so its old outcomes are wrong: the point is the time).
"""
from __future__ import annotations

import argparse
import functools
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from git_pf.testing.fakellm import FakeLLM

from .common import git_env, recorded_run, report, verdict, workdir

AGENT = '''import json, os, urllib.request
from pathlib import Path
base, world = os.environ["OPENAI_BASE_URL"].rstrip("/"), Path(os.environ["GIT_PF_WORLD"])
messages = [{"role": "system", "content": "bench"}]
for i in range(1, int(os.environ["BENCH_STEPS"]) + 1):
    log = world / "log.txt"
    messages.append({"role": "user", "content": f"step {i}"})
    req = urllib.request.Request(base + "/chat/completions", method="POST", headers={"content-type": "application/json"},
                                 data=json.dumps({"model": "fake-model", "messages": messages}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        reply = json.load(resp)["choices"][0]["message"].get("content") or ""
    messages.append({"role": "assistant", "content": reply})
    with open(log, "a") as f:
        f.write(reply + "\\n")
'''


def by_step(steps: int):
    def pick(api, request, n):
        i = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
        return "BUG" if i == steps // 2 else f"reply {i}"
    return pick


def prefix_cost(repo, base: Path, agent: Path, fake, steps: int, fork_at: int, rounds: int) -> list[tuple]:
    from git_pf.runs import forking, runon
    from git_pf.runs.llm import wire

    times = {True: [], False: []}
    for r in range(rounds):
        for resume in (True, False):
            name = f"f{r}-{int(resume)}"
            forking.fork_at_step(repo, "run", fork_at, name=name,
                                 entry_change=lambda e: wire.with_reply(e, f"reply {fork_at}"))
            t0 = time.perf_counter()
            result, prefix = runon.run(repo, name, [sys.executable, str(agent)], upstreams=[fake.url],
                                       fs_root=base / name, resume_world=resume, output=subprocess.DEVNULL)
            times[resume].append(time.perf_counter() - t0)
            assert result.exit == 0 and prefix.mismatch is None and prefix.world is None, (result, prefix.mismatch)
    n, s0 = statistics.median(times[True]), statistics.median(times[False])
    return [(f"start in step {fork_at}'s world (--resume-world)", f"{n * 1000:.0f} ms", f"median of {rounds}"),
            ("start in step 0's world, prefix replayed and checked", f"{s0 * 1000:.0f} ms", f"median of {rounds}"),
            ("step 0 against step N", f"{s0 / n:.2f}x", f"goal < 2x: {verdict(s0 / n < 2)}")]


def check_cost(repo, base: Path, files: int, looks: int) -> list[tuple]:
    from git_pf.runs.stepworld import LiveWorld

    world = base / "big"
    for i in range(files):
        d = world / f"d{i % 50:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:05d}.txt").write_text(f"file {i}\n" * 4)
    live = LiveWorld(repo, world, ())
    t0 = time.perf_counter()
    live.capture(repo, None)
    cold = time.perf_counter() - t0
    took = []
    for i in range(looks):
        (world / f"d{i % 50:02d}" / f"f{i:05d}.txt").write_text(f"changed {i}\n")
        t0 = time.perf_counter()
        live.capture(repo, None)
        took.append(time.perf_counter() - t0)
    live.watch.close()
    med = statistics.median(took) * 1000
    return [(f"first look at a {files}-file world (hashes it all)", f"{cold * 1000:.0f} ms", "once per replay"),
            ("a world check, one file changed since the last", f"{med:.2f} ms", f"median of {looks}; goal <= 5 ms: "
                                                                              f"{verdict(med <= 5)}")]


def blame_rate(repo, agent: Path, fake, k: int, steps: int) -> list[tuple]:
    from git_pf.blame import trials
    from git_pf.blame.engine import BlameOptions, blame

    rates = {}
    oracle = "! grep -q BUG log.txt"
    for old in (True, False):
        saved = trials.runon.run, trials.at_step
        if old:  # the old trials: the fork step's world, the prefix done again over it
            trials.runon.run = functools.partial(saved[0], resume_world=True)
            trials.at_step = lambda git, rev, n: rev
        try:
            opts = BlameOptions(oracle=oracle, k=k, upstreams=[fake.url], name=f"old{int(old)}", mount=False,
                                steps=(steps - 3, steps))
            t0 = time.perf_counter()
            out = blame(repo, "run", [sys.executable, str(agent)], opts)
            rates[old] = len(out["trials"]) / (time.perf_counter() - t0) * 60
        finally:
            trials.runon.run, trials.at_step = saved
    return [("trials in the fork step's world (before)", f"{rates[True]:.1f} trials/min", "outcomes wrong for "
                                                                                          "this agent"),
            ("trials from step 0 (now)", f"{rates[False]:.1f} trials/min", f"{rates[False] / rates[True]:.2f}x")]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_runs_world")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--fork-at", type=int, default=18)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", type=int, default=2)
    args = ap.parse_args(argv)

    os.environ.update(git_env(), BENCH_STEPS=str(args.steps))
    with workdir("runs-world") as base, FakeLLM(by_step(args.steps)) as fake:
        repo, agent = recorded_run(base, AGENT, fake.url)
        report(f"A run from step 0 against from step N: a {args.steps}-step agent, fork at {args.fork_at}",
               prefix_cost(repo, base, agent, fake, args.steps, args.fork_at, args.rounds))
        report(f"The world check per step, a {args.files}-file world", check_cost(repo, base, args.files, 40))
        report(f"Blame trials per minute, the same agent, k={args.k}, its last 4 steps",
               blame_rate(repo, agent, fake, args.k, args.steps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
