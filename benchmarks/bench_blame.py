"""Blame trials per minute with ``--jobs 2`` against one job, on a scripted agent.

    python -m benchmarks.bench_blame [--steps 4] [-k 3] [--delay-ms 200] [--world auto|mount|checkout]
    python -m benchmarks.bench_blame --reuse [--files 3000] [--repeat 3] [--steps 4] [-k 2] [--delay-ms 0]

A small agent (written into the work directory) makes one chat call per step through the proxy and
writes each reply into its world; the fake LLM server answers by step, after ``--delay-ms`` (a
model's latency). The run is recorded once, then blamed twice through the Python API
(``git_pf.blame.engine.blame``), with one job and with two, each blame run under its own name;
every trial forks, runs on in its own world (a copy-on-write mount where FUSE is there, else a
checkout: ``--world``) and is graded by an oracle. Prints trials per minute of each and the ratio,
and whether the two gave the same outcomes.

``--reuse``: the same blame (one job, checkouts) in a world of ``--files`` files, with each trial's
world checked out afresh (as before trials reused one) against the reused world directory
(``executors.worlds.ReusedWorld``: moved back to a fresh checkout), interleaved ``--repeat``
times, alternating which goes first; prints the median seconds per trial of each and the ratio.
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


def _grid(files: int):
    """Fill a world with ``files`` small files, 50 to a directory."""
    def fill(world) -> None:
        for i in range(files):
            d = world / f"d{i // 50:03d}"
            d.mkdir(exist_ok=True)
            (d / f"f{i % 50:02d}.txt").write_text(f"file {i}\n" * 8)
    return fill


def reuse(args) -> int:
    """Seconds per trial, each trial's world checked out afresh against one reused world directory."""
    import statistics
    import tempfile
    from pathlib import Path

    from git_pf.blame import engine
    from git_pf.blame.engine import BlameOptions, blame
    from git_pf.executors.worlds import ReusedWorld
    from git_pf.runs.replaying import fresh_world

    class Fresh(ReusedWorld):
        """Each trial's world checked out into a new directory, the one before removed (as before)."""

        def enter(self, image):
            self.close()
            self.tmp = Path(tempfile.mkdtemp(prefix="pf-blame-"))
            return fresh_world(self.repo, image, self.world)

    os.environ.update(git_env(), BENCH_STEPS=str(args.steps))
    times: dict[str, list[float]] = {"fresh": [], "reused": []}
    outcomes = {}
    with workdir("blame-reuse") as base, FakeLLM(by_step(args.steps), delay_ms=args.delay_ms) as fake:
        repo, agent = recorded_run(base, AGENT, fake.url, fill=_grid(args.files))
        for r in range(args.repeat):
            for arm in (("fresh", "reused") if r % 2 == 0 else ("reused", "fresh")):
                engine.ReusedWorld = Fresh if arm == "fresh" else ReusedWorld
                try:
                    opts = BlameOptions(oracle=ORACLE, k=args.k, jobs=1, upstreams=[fake.url], name=f"{arm}{r}",
                                        mount=False)
                    t0 = time.perf_counter()
                    out = blame(repo, "run", [sys.executable, str(agent)], opts)
                    took = time.perf_counter() - t0
                finally:
                    engine.ReusedWorld = ReusedWorld
                times[arm].append(took / len(out["trials"]))
                outcomes.setdefault(arm, [(t["step"], t["trial"], t["outcome"]) for t in out["trials"]])
                print(f"  round {r + 1} {arm}: {times[arm][-1]:.3f} s/trial (load {os.getloadavg()[0]:.1f})",
                      file=sys.stderr)
    fresh, reused = statistics.median(times["fresh"]), statistics.median(times["reused"])
    same = outcomes["fresh"] == outcomes["reused"]
    report(f"Blame trials in a world of {args.files} files ({args.steps} steps, k={args.k}, one job, checkouts), "
           f"median of {args.repeat} interleaved rounds",
           [("a fresh checkout per trial", f"{fresh:.3f} s/trial", ""),
            ("one reused world directory", f"{reused:.3f} s/trial", ""),
            ("reused against fresh", f"{fresh / reused:.2f}x faster", "same outcomes" if same else "OUTCOMES DIFFER")])
    return 0 if same else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_blame")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("-k", type=int, default=None)
    ap.add_argument("--delay-ms", type=float, default=None)
    ap.add_argument("--world", choices=("auto", "mount", "checkout"), default="auto")
    ap.add_argument("--reuse", action="store_true", help="fresh checkouts per trial against one reused world")
    ap.add_argument("--files", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    if args.reuse:
        args.k = 2 if args.k is None else args.k
        args.delay_ms = 0.0 if args.delay_ms is None else args.delay_ms
        return reuse(args)
    args.k = 3 if args.k is None else args.k
    args.delay_ms = 200.0 if args.delay_ms is None else args.delay_ms
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
