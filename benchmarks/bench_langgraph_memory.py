"""LangGraph checkpoints over a long session: PfSaver's memory against SqliteSaver's, in one run.

    python -m benchmarks.bench_langgraph_memory [--steps 4000] [--rounds 1] [--trace]

A small graph (an agent node and a tool node, its state a counter and the last ten log
lines, so what a checkpoint holds stays the same size) is invoked again and again on one
thread, ``durability="sync"``, until the saver has taken STEPS checkpoints: a long session
in the user's process. Each saver runs in a process of its own (SqliteSaver on a database
file, PfSaver on a repository; the order alternates by round), which samples its RssAnon
and libgit2's cached bytes (``pygit2.settings.cached_memory``) at each tenth of the
session. ``--trace``: tracemalloc's largest growths in Python objects between the first
tenth and the last (slow). At the end, on the long thread: the median time of a turn
(``invoke``: its puts and get_tuples), of ``get_tuple`` of the latest checkpoint and of the
first one, and of ``list`` (its newest 10, and all). Goal: PfSaver's RssAnon grows no more than about twice
SqliteSaver's from the first tenth to the last (the ratio is printed; within 2x, or within
0.5 MiB of SqliteSaver's growth where that is under a page table's worth of noise).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import tracemalloc
from typing import Annotated, TypedDict

from .common import report, verdict, workdir
from .soak import rss_kib

FILLER = "lorem ipsum dolor sit amet " * 16  # about 430 bytes a log line


class State(TypedDict):
    n: int
    log: Annotated[list[str], lambda old, new: (old + new)[-10:]]


def graph(checkpointer):
    from langgraph.graph import END, START, StateGraph

    def agent(state: State):
        return {"n": state["n"] + 1, "log": [f"thought {state['n']}: {FILLER}"]}

    def tool(state: State):
        return {"log": [f"tool result {state['n']}: {FILLER}"]}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("tool", tool)
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    g.add_edge("tool", END)
    return g.compile(checkpointer=checkpointer)


def saver_of(name: str, base):
    if name == "sqlite":
        import sqlite3

        from langgraph.checkpoint.sqlite import SqliteSaver
        return SqliteSaver(sqlite3.connect(base / "checkpoints.db", check_same_thread=False))
    from git_pf.integrations.langgraph import PfSaver
    return PfSaver(base / "repo")


def child(name: str, steps: int, base, trace: bool) -> dict:
    """One session in this process: the samples at each tenth, as a dict for the parent."""
    import pygit2
    saver = saver_of(name, base)
    app = graph(saver)
    config = {"configurable": {"thread_id": "session"}}
    app.invoke({"n": 0, "log": []}, config, durability="sync")
    per_invoke = sum(1 for _ in app.get_state_history(config))  # checkpoints one invoke writes
    invokes = max(10, steps // per_invoke)
    samples, first, t0 = [], None, time.perf_counter()
    for i in range(1, invokes + 1):
        app.invoke({"log": [f"user {i}"]}, config, durability="sync")
        if i % (invokes // 10) == 0 and len(samples) < 10:
            anon, file = rss_kib(os.getpid())
            samples.append({"checkpoints": (i + 1) * per_invoke, "anon": anon, "file": file,
                            "cached": pygit2.settings.cached_memory[0]})
            if trace and len(samples) == 1:
                tracemalloc.start(8)
                first = tracemalloc.take_snapshot()
    seconds = time.perf_counter() - t0
    oldest = {"configurable": {**config["configurable"], "checkpoint_ns": "",
                               "checkpoint_id": list(saver.list(config))[-1].config["configurable"]["checkpoint_id"]}}
    timed = {"turn": lambda: app.invoke({"log": ["user again"]}, config, durability="sync"),
             "get_tuple latest": lambda: saver.get_tuple(config),
             "get_tuple first": lambda: saver.get_tuple(oldest),
             "list newest 10": lambda: list(saver.list(config, limit=10)),
             "list all": lambda: list(saver.list(config))}
    speed = {}
    for what, call in timed.items():
        took = []
        for _ in range(3 if what == "list all" else 11):
            t = time.perf_counter()
            call()
            took.append(time.perf_counter() - t)
        speed[what] = sorted(took)[len(took) // 2]
    grown = []
    if first is not None:
        diff = tracemalloc.take_snapshot().compare_to(first, "traceback")
        grown = [f"{d.size_diff / 1024:+.0f} KiB in {d.count_diff:+d} blocks at "
                 + " <- ".join(f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno}" for f in list(d.traceback)[::-1][:5])
                 for d in diff[:8]]
    return {"samples": samples, "seconds": seconds, "grown": grown, "speed": speed}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--trace", action="store_true")
    ap.add_argument("--child", choices=("sqlite", "pf"), help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        from pathlib import Path
        print(json.dumps(child(args.child, args.steps, Path(args.dir), args.trace)))
        return
    got: dict[str, list[dict]] = {"sqlite": [], "pf": []}
    for r in range(args.rounds):
        for name in (("sqlite", "pf") if r % 2 == 0 else ("pf", "sqlite")):
            with workdir("langgraph-memory") as base:
                cmd = [sys.executable, "-m", "benchmarks.bench_langgraph_memory", "--child", name,
                       "--steps", str(args.steps), "--dir", str(base)] + (["--trace"] if args.trace else [])
                got[name].append(json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True).stdout))
    rows = []
    for name, label in (("sqlite", "SqliteSaver"), ("pf", "PfSaver")):
        for run in got[name]:
            s = run["samples"]
            rows.append((f"{label} RssAnon per tenth (MiB)", " ".join(f"{x['anon'] / 1024:.0f}" for x in s),
                         f"{s[-1]['checkpoints']} checkpoints, {run['seconds']:.0f} s"))
            if name == "pf":
                rows.append((f"{label} libgit2 cached (KiB)", " ".join(f"{x['cached'] // 1024}" for x in s), ""))
            rows.extend(("  grown", g, "") for g in run["grown"])
    grew = {n: [(r["samples"][-1]["anon"] - r["samples"][0]["anon"]) / 1024 for r in runs] for n, runs in got.items()}
    growth = {n: min(g) for n, g in grew.items()}
    rows.append(("RssAnon growth per round (MiB)", " / ".join(f"{n} " + ", ".join(f"{x:.2f}" for x in g)
                                                         for n, g in grew.items()), ""))
    ok = growth["pf"] <= max(2 * growth["sqlite"], growth["sqlite"] + 0.5)
    rows.append(("RssAnon growth, first tenth to last (MiB)", f"pf {growth['pf']:.2f} / sqlite {growth['sqlite']:.2f}",
                 f"{growth['pf'] / max(growth['sqlite'], 0.01):.1f}x; pf <= 2x sqlite (or + 0.5): {verdict(ok)}"))
    for what in got["pf"][0]["speed"]:
        pf, sq = (min(r["speed"][what] for r in got[n]) * 1e3 for n in ("pf", "sqlite"))
        rows.append((f"{what} (ms, median, best round)", f"pf {pf:.2f} / sqlite {sq:.2f}", f"{pf / sq:.2f}x"))
    report(f"LangGraph checkpoints over a long session: memory, {args.steps} checkpoints", rows)


if __name__ == "__main__":
    main()
