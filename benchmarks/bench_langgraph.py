"""LangGraph checkpointing: PfSaver against langgraph-checkpoint-sqlite's SqliteSaver, in one run.

    python -m benchmarks.bench_langgraph [--turns 100] [--rounds 3]

A chat graph (a fake chat model answering TURNS times, the conversation growing by two
messages a turn) runs once with a recording saver; the checkpoints and writes LangGraph
handed it are then replayed, in order, into a SqliteSaver (a database file) and a PfSaver
(a repository), one after the other, in rounds whose order alternates. Measured: each
``put`` followed by the ``get_tuple`` of what it wrote (median and mean per checkpoint), and
each ``put_writes``. Goal: put + get_tuple within 5x of SqliteSaver (median of the best round).
"""
from __future__ import annotations

import argparse
import copy
import sqlite3
import statistics
import time

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.graph import END, START, MessagesState, StateGraph

from git_pf.integrations.langgraph import PfSaver

from .common import report, verdict, workdir


class Recorder(InMemorySaver):
    """Keeps every put and put_writes LangGraph makes, in order."""

    def __init__(self):
        super().__init__()
        self.calls: list[tuple] = []

    def put(self, config, checkpoint, metadata, new_versions):
        self.calls.append(("put", copy.deepcopy((config, checkpoint, metadata, new_versions))))
        return super().put(config, checkpoint, metadata, new_versions)

    def put_writes(self, config, writes, task_id, task_path=""):
        self.calls.append(("writes", copy.deepcopy((config, list(writes), task_id, task_path))))
        return super().put_writes(config, writes, task_id, task_path)


def record(turns: int) -> list[tuple]:
    model = GenericFakeChatModel(messages=iter([AIMessage(f"answer {i}: " + "lorem ipsum " * 20) for i in range(turns)]))

    def agent(state: MessagesState):
        return {"messages": [model.invoke(state["messages"])]}

    def user(state: MessagesState):
        return {"messages": [HumanMessage(f"question {len(state['messages']) // 2}")]}

    g = StateGraph(MessagesState)
    g.add_node("agent", agent)
    g.add_node("user", user)
    g.add_edge(START, "agent")
    g.add_conditional_edges("agent", lambda s: END if len(s["messages"]) >= 2 * turns else "user")
    g.add_edge("user", "agent")
    saver = Recorder()
    g.compile(checkpointer=saver).invoke({"messages": [HumanMessage("question 0")]},
                                         {"configurable": {"thread_id": "bench"}, "recursion_limit": 4 * turns + 10},
                                         durability="sync")
    return saver.calls


def _thread(config, thread: str):
    out = copy.deepcopy(config)
    out["configurable"] = {k: v for k, v in out["configurable"].items() if not k.startswith("__")}
    out["configurable"]["thread_id"] = thread
    return out


def replay(saver, calls: list[tuple], thread: str) -> tuple[list[float], list[float]]:
    """Seconds per put + get_tuple, and per put_writes."""
    puts, writes = [], []
    for kind, args in calls:
        config = _thread(args[0], thread)
        t0 = time.perf_counter()
        if kind == "put":
            stored = saver.put(config, *args[1:])
            assert saver.get_tuple(stored).checkpoint["id"] == args[1]["id"]
            puts.append(time.perf_counter() - t0)
        else:
            saver.put_writes(config, *args[1:])
            writes.append(time.perf_counter() - t0)
    return puts, writes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--turns", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    calls = record(args.turns)
    n_puts = sum(1 for kind, _ in calls if kind == "put")
    best: dict[str, tuple[list[float], list[float]]] = {}
    with workdir("langgraph") as base:
        conn = sqlite3.connect(base / "checkpoints.db", check_same_thread=False)
        savers = {"sqlite": SqliteSaver(conn), "pf": PfSaver(base / "repo")}
        for r in range(args.rounds):
            for name in (("sqlite", "pf") if r % 2 == 0 else ("pf", "sqlite")):
                got = replay(savers[name], calls, f"round-{r}")
                if name not in best or statistics.median(got[0]) < statistics.median(best[name][0]):
                    best[name] = got
        conn.close()
    ms = {n: (statistics.median(p) * 1e3, statistics.mean(p) * 1e3, statistics.median(w) * 1e3 if w else 0.0)
          for n, (p, w) in best.items()}
    ratio = ms["pf"][0] / ms["sqlite"][0]
    report(f"LangGraph checkpoints: {n_puts} puts of a {args.turns}-turn chat, best of {args.rounds} rounds", [
        ("SqliteSaver put + get_tuple", f"{ms['sqlite'][0]:.2f} ms (mean {ms['sqlite'][1]:.2f})", ""),
        ("PfSaver put + get_tuple", f"{ms['pf'][0]:.2f} ms (mean {ms['pf'][1]:.2f})", ""),
        ("ratio (median)", f"{ratio:.2f}x", f"<= 5x: {verdict(ratio <= 5)}"),
        ("put_writes, sqlite / pf", f"{ms['sqlite'][2]:.2f} / {ms['pf'][2]:.2f} ms", ""),
    ])


if __name__ == "__main__":
    main()
