"""Blame trials per minute with ``--jobs 2`` against one job, on a scripted agent.

    python -m benchmarks.bench_blame [--steps 4] [-k 3] [--delay-ms 200] [--world auto|mount|checkout]

A small agent (written into the work directory) makes one chat call per step through the proxy and
writes each reply into its world; the fake LLM server answers by step, after ``--delay-ms`` (a
model's latency). The run is recorded once, then blamed twice through the Python API
(``git_pf.blame.engine.blame``), with one job and with two, each blame run under its own name;
every trial forks, runs on in its own world (a copy-on-write mount where FUSE is there, else a
checkout: ``--world``) and is graded by an oracle. Prints trials per minute of each and the ratio,
and whether the two gave the same outcomes.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

from git_pf.testing.fakellm import FakeLLM

from .common import git_env, recorded_run, report, workdir

AGENT = '''import json, os, sys, urllib.request
from pathlib import Path
base, world = os.environ["OPENAI_BASE_URL"].rstrip("/"), Path(os.environ["GIT_PF_WORLD"])
messages = [{"role": "system", "content": "bench"}]
for i in range(1, int(os.environ["BENCH_STEPS"]) + 1):
    messages.append({"role": "user", "content": f"step {i}"})
    req = urllib.request.Request(base + "/chat/completions", method="POST", headers={"content-type": "application/json"},
                                 data=json.dumps({"model": "fake-model", "messages": messages}).encode())
    with urllib.request.urlopen(req, timeout=60) as resp:
        reply = json.load(resp)["choices"][0]["message"].get("content") or ""
    messages.append({"role": "assistant", "content": reply})
    (world / f"out-{i}.txt").write_text(reply)
'''
ORACLE = "! grep -q BUG out-*.txt"


def by_step(steps: int):
    replies = [f"reply {i}" if i != (steps + 1) // 2 else "BUG" for i in range(1, steps + 1)]

    def pick(api, request, n):
        i = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
        return replies[i - 1] if 0 < i <= steps else "done"
    return pick


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_blame")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--delay-ms", type=float, default=200.0)
    ap.add_argument("--world", choices=("auto", "mount", "checkout"), default="auto")
    args = ap.parse_args(argv)
    from git_pf.blame.engine import BlameOptions, blame
    from git_pf.blame.trials import fuse_available

    mount = {"auto": None, "mount": True, "checkout": False}[args.world]
    kind = "mount" if (fuse_available() if mount is None else mount) else "checkout"
    os.environ.update(git_env(), BENCH_STEPS=str(args.steps))
    with workdir("blame") as base, FakeLLM(by_step(args.steps), delay_ms=args.delay_ms) as fake:
        repo, agent = recorded_run(base, AGENT, fake.url)
        rows, outcomes = [], []
        rates = {}
        for jobs in (1, 2):
            opts = BlameOptions(oracle=ORACLE, k=args.k, jobs=jobs, upstreams=[fake.url], name=f"jobs{jobs}",
                                mount=mount)
            t0 = time.perf_counter()
            out = blame(repo, "run", [sys.executable, str(agent)], opts)
            took = time.perf_counter() - t0
            n = len(out["trials"])
            rates[jobs] = n / took * 60
            outcomes.append([(t["step"], t["trial"], t["outcome"]) for t in out["trials"]])
            rows.append((f"--jobs {jobs} ({n} trials, {kind} worlds)", f"{rates[jobs]:.1f} trials/min",
                         f"{took:.1f} s, decisive step {out['decisive']}"))
    rows.append(("--jobs 2 against --jobs 1", f"{rates[2] / rates[1]:.2f}x",
                 "same outcomes" if outcomes[0] == outcomes[1] else "OUTCOMES DIFFER"))
    report(f"Blame trials per minute, a {args.steps}-step scripted agent, k={args.k}, "
           f"model latency {args.delay_ms:g} ms", rows)
    return 0 if outcomes[0] == outcomes[1] else 1


if __name__ == "__main__":
    sys.exit(main())
