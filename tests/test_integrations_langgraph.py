"""PfSaver, the LangGraph checkpointer (docs/integrations.md, "LangGraph"): LangGraph's own
conformance suite, a real graph with a fake chat model that is interrupted, resumed, sent
back in time and forked, with git history checked against ``get_state_history``, and a thread
pushed with plain ``git push`` and resumed in a clone."""
from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Annotated, TypedDict

import pygit2
import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, HumanMessage  # noqa: E402
from langgraph.checkpoint.conformance import checkpointer_test, validate  # noqa: E402
from langgraph.graph import END, START, MessagesState, StateGraph  # noqa: E402
from langgraph.types import Command, interrupt  # noqa: E402

from git_pf import Repo  # noqa: E402
from git_pf.integrations.langgraph import PfSaver  # noqa: E402
from git_pf.integrations.langgraph_store import Key, decode  # noqa: E402


def test_langgraph_conformance_suite_passes_in_full(tmp_path):
    made = []

    @checkpointer_test(name="PfSaver")
    async def saver():
        made.append(tmp_path / f"r{len(made)}")
        yield PfSaver(made[-1])

    report = asyncio.run(validate(saver))
    failures = {cap: r.failures for cap, r in report.results.items() if not r.passed}
    assert failures == {} and report.passed_all()  # base and extended capabilities, every case
    assert len(made) == 8


class State(MessagesState):
    approved: str


def build(saver: PfSaver, replies: list[str], sandbox: Path | None = None):
    """agent (a fake chat model; writes its reply into the sandbox) -> review (asks a human) -> end."""
    model = GenericFakeChatModel(messages=iter([AIMessage(r) for r in replies]))

    def agent(state: State):
        reply = model.invoke(state["messages"])
        if sandbox is not None:
            (sandbox / "reply.txt").write_text(reply.content)
        return {"messages": [reply]}

    def review(state: State):
        return {"approved": interrupt(f"approve '{state['messages'][-1].content}'?")}

    g = StateGraph(State)
    g.add_node("agent", agent)
    g.add_node("review", review)
    g.add_edge(START, "agent")
    g.add_edge("agent", "review")
    g.add_edge("review", END)
    return g.compile(checkpointer=saver)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def git_checkpoints(cwd: Path, refs_glob: str) -> dict[str, tuple[str, list[str]]]:
    """commit -> (checkpoint id, parent commits) for every image reachable from ``refs_glob``, read by git."""
    out = {}
    log = git(cwd, "log", f"--glob={refs_glob}", "--format=%H %P%x00%(trailers:key=Pf-LangGraph-Checkpoint,valueonly)%x01")
    for entry in filter(str.strip, log.split("\x01")):
        head, cid = entry.strip("\n").split("\x00")
        commit, *parents = head.split()
        out[commit] = (decode(cid.strip()), parents)
    return out


def newest_image(cwd: Path, branch: str) -> dict[str, str]:
    """checkpoint id -> the commit that holds it last (writes come in later images of it)."""
    first_parent = git(cwd, "log", "--first-parent", "--reverse", f"--format=%H %(trailers:key=Pf-LangGraph-Checkpoint,valueonly)",
                       f"refs/pf/heads/{branch}").split("\n")
    return {decode(cid.strip()): commit for commit, _, cid in (line.partition(" ") for line in first_parent if line)}


def test_graph_interrupts_resumes_time_travels_and_forks_as_git_history(tmp_path):
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    saver = PfSaver(tmp_path / "repo", fs_root=sandbox)
    graph = build(saver, ["first draft", "second draft"], sandbox)
    config = {"configurable": {"thread_id": "chat/1"}}
    repo_dir = tmp_path / "repo"

    # durability="sync": each checkpoint (and its world) is written before the next step runs
    out = graph.invoke({"messages": [HumanMessage("write a poem")]}, config, durability="sync")
    assert out["__interrupt__"][0].value == "approve 'first draft'?"
    assert graph.get_state(config).next == ("review",)
    out = graph.invoke(Command(resume="yes"), config, durability="sync")
    assert out["approved"] == "yes" and [m.content for m in out["messages"]] == ["write a poem", "first draft"]

    # every checkpoint of the thread is an image on branch lg/chat%2F1, one after the other
    history = list(graph.get_state_history(config))
    branch = Key("chat/1").branch
    assert branch == "lg/chat%2F1"
    images = newest_image(repo_dir, branch)
    assert list(images) == [s.config["configurable"]["checkpoint_id"] for s in reversed(history)]
    # the world was snapshotted with each checkpoint: before the agent ran there was no reply
    repo = Repo.open(repo_dir)
    before_agent = next(s for s in history if s.next == ("agent",))
    after_agent = next(s for s in history if s.next == ("review",))
    assert repo.read_layer(images[after_agent.config["configurable"]["checkpoint_id"]], "world/fs/reply.txt") == b"first draft"
    assert repo.read_layer(images[before_agent.config["configurable"]["checkpoint_id"]], "world/fs/reply.txt") is None

    # time travel: run again from before the agent; the model answers anew and the run forks
    out = graph.invoke(None, before_agent.config, durability="sync")
    assert out["__interrupt__"][0].value == "approve 'second draft'?"
    graph.invoke(Command(resume="no"), config, durability="sync")
    assert graph.get_state(config).values["approved"] == "no"
    # fork by hand: update_state on the first answer writes a checkpoint whose parent is that one
    forked = graph.update_state(after_agent.config, {"messages": [AIMessage("edited draft")]}, as_node="agent")
    assert graph.get_state(forked).values["messages"][-1].content == "edited draft"

    history = list(graph.get_state_history(config))
    by_git = git_checkpoints(repo_dir, f"refs/pf/heads/{branch}*")
    ids = {s.config["configurable"]["checkpoint_id"] for s in history}
    assert {cid for cid, _ in by_git.values()} == ids  # git history holds every checkpoint, nothing else
    # each checkpoint's first image has its parent checkpoint's image as git parent
    for s in history:
        cid = s.config["configurable"]["checkpoint_id"]
        first = [c for c, (i, parents) in by_git.items() if i == cid and all(by_git[p][0] != cid for p in parents)]
        assert len(first) == 1
        parents = by_git[first[0]][1]
        want = s.parent_config["configurable"]["checkpoint_id"] if s.parent_config else None
        assert [by_git[p][0] for p in parents] == ([want] if want else [])
    # three lines of history: the branch at the latest checkpoint, the older tips kept as branches
    heads = git(repo_dir, "for-each-ref", "--format=%(refname)", f"refs/pf/heads/{branch}*").split()
    assert heads[0] == f"refs/pf/heads/{branch}" and len(heads) == 3
    assert git(repo_dir, "rev-parse", f"refs/pf/heads/{branch}").strip() == \
        newest_image(repo_dir, branch)[forked["configurable"]["checkpoint_id"]]
    assert repo.fsck().ok


def test_writes_sent_after_the_next_checkpoint_make_no_branch_and_are_kept(tmp_path):
    """LangGraph saves a task's writes and the next checkpoint in different background jobs, so
    the writes to a checkpoint may come after its child: they stay in the thread's one line."""
    from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

    saver, repo_dir = PfSaver(tmp_path / "repo"), tmp_path / "repo"
    first = empty_checkpoint()
    c1 = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, first, {"step": 0}, {})
    c2 = saver.put(c1, create_checkpoint(first, None, 1), {"step": 1, "run_id": "second"}, {})
    saver.put_writes(c1, [("messages", "late")], "task-1")
    heads = git(repo_dir, "for-each-ref", "--format=%(refname)", "refs/pf/heads/lg/t*").split()
    assert heads == ["refs/pf/heads/lg/t"]
    for fresh in (saver, PfSaver(repo_dir)):
        assert fresh.get_tuple(c1).pending_writes == [("task-1", "messages", "late")]
        assert fresh.get_tuple({"configurable": {"thread_id": "t"}}).config == c2
        assert [t.config for t in fresh.list({"configurable": {"thread_id": "t"}})] == [c2, c1]
    # a rewrite keeps the writes too: the child checkpoint's run is deleted, its parent stays whole
    saver.delete_for_runs(["second"])
    assert [t.config for t in saver.list({"configurable": {"thread_id": "t"}})] == [c1]
    assert saver.get_tuple(c1).pending_writes == [("task-1", "messages", "late")]
    assert Repo.open(repo_dir).fsck().ok


def test_thread_pushes_with_plain_git_and_resumes_in_a_clone(tmp_path, run_pf):
    source, remote, clone = tmp_path / "source", tmp_path / "remote.git", tmp_path / "clone"
    config = {"configurable": {"thread_id": "t2"}}
    graph = build(PfSaver(source), ["draft"])
    graph.invoke({"messages": [HumanMessage("hi")]}, config)
    git(tmp_path, "init", "-q", "--bare", str(remote))
    git(source, "remote", "add", "origin", str(remote))
    run_pf("install", cwd=source)
    git(source, "push", "-q")
    assert git(remote, "for-each-ref", "--format=%(refname)").split() == ["refs/pf/heads/lg/t2"]

    run_pf("clone", str(remote), str(clone))
    graph = build(PfSaver(clone), [])
    state = graph.get_state(config)
    assert state.next == ("review",) and state.values["messages"][-1].content == "draft"
    out = graph.invoke(Command(resume="ship it"), config)
    assert out["approved"] == "ship it"
    # the clone's thread continues the pushed history: its branch descends from the remote's
    pushed = git(clone, "rev-parse", "refs/pf/remotes/origin/heads/lg/t2").strip()
    git(clone, "merge-base", "--is-ancestor", pushed, "refs/pf/heads/lg/t2")
    assert len(list(graph.get_state_history(config))) == len(list(build(PfSaver(source), []).get_state_history(config))) + 1
    assert Repo.open(clone).fsck().ok
    assert "langgraph: input step -1" in run_pf("log", "lg/t2", cwd=clone).stdout


class Session(TypedDict):
    n: int
    log: Annotated[list[str], lambda old, new: (old + new)[-10:]]


def test_a_long_session_keeps_no_memory_or_packs_that_grow_with_it(tmp_path):
    """The saver runs in the user's process for as long as the graph does: libgit2's object cache
    (on by default, 256 MiB a process) kept every object each checkpoint read back, the saver kept
    every checkpoint it wrote decoded, and each write left a pack of its own (an open file each)
    (docs/integrations.md, "Memory")."""
    pygit2.settings.enable_caching(True)  # libgit2's default in a user's process (a recorder run in
    # this test process before switches it off process-wide, as the recorder's own process does)
    g = StateGraph(Session)
    g.add_node("agent", lambda s: {"n": s["n"] + 1, "log": [f"thought {s['n']}"]})
    g.add_node("tool", lambda s: {"log": [f"result {s['n']}"]})
    g.add_edge(START, "agent")
    g.add_edge("agent", "tool")
    g.add_edge("tool", END)
    saver = PfSaver(tmp_path / "repo")
    graph, config = g.compile(checkpointer=saver), {"configurable": {"thread_id": "long"}}
    cached: dict[int, int] = {}
    for turn in range(100):  # 4 checkpoints a turn
        graph.invoke({"n": 0, "log": []} if turn == 0 else {"log": [f"user {turn}"]}, config, durability="sync")
        cached[4 * turn + 4] = pygit2.settings.cached_memory[0]
    early = max(v for k, v in cached.items() if k <= 100)
    assert min(v for k, v in cached.items() if k >= 200) < early  # let go of, not kept for the session
    assert len(saver._records) <= 256
    assert len(list((tmp_path / "repo" / ".git" / "objects" / "pack").glob("*.pack"))) <= 16
    assert graph.get_state(config).values["n"] == 100
    assert len(list(graph.get_state_history(config))) == 400


def test_a_saver_serving_many_threads_keeps_the_indexes_of_recent_ones(tmp_path):
    """A server's saver meets thread after thread: it kept the index of every one it ever read."""
    from langgraph.checkpoint.base import empty_checkpoint

    saver = PfSaver(tmp_path / "repo")
    for n in range(80):
        config = {"configurable": {"thread_id": f"user-{n}", "checkpoint_ns": ""}}
        saver.put(config, {**empty_checkpoint(), "channel_values": {"n": n}, "channel_versions": {"n": 1}},
                  {"step": n}, {"n": 1})
    assert len(saver._threads) <= 64
    first = saver.get_tuple({"configurable": {"thread_id": "user-0"}})  # let go of, read again from its refs
    assert first.checkpoint["channel_values"] == {"n": 0} and first.metadata["step"] == 0
    assert len(list(saver.list(None))) == 80


def test_a_long_thread_stays_listable_and_readable_after_its_index_lets_old_checkpoints_go(tmp_path):
    """A long thread's index keeps its newest checkpoints only (it grew by every image for the
    whole session): every older one is still listed, read, written to and forked from, found in git."""
    from langgraph.checkpoint.base import empty_checkpoint

    from git_pf.integrations.langgraph_store import HOT

    saver, config, ids = PfSaver(tmp_path / "repo"), {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}, []
    for n in range(3 * HOT + 10):
        parent = {"configurable": {**config["configurable"], "checkpoint_id": ids[-1]}} if ids else config
        ids.append(saver.put(parent, {**empty_checkpoint(), "channel_values": {"n": n}, "channel_versions": {"n": n + 1}},
                             {"step": n}, {"n": n + 1})["configurable"]["checkpoint_id"])
        if n % 25 == 0:
            saver.put_writes({"configurable": {**config["configurable"], "checkpoint_id": ids[-1]}}, [("n", -n)], f"task-{n}")
    assert len(saver._threads[Key("long")].images) <= 2 * HOT  # the index let the oldest go

    def at(cid: str) -> dict:
        return {"configurable": {**config["configurable"], "checkpoint_id": cid}}

    for reader in (saver, PfSaver(tmp_path / "repo")):  # this saver, and one reading the branch afresh
        listed = list(reader.list(config))
        assert [t.config["configurable"]["checkpoint_id"] for t in listed] == ids[::-1]
        assert [t.checkpoint["channel_values"]["n"] for t in listed] == list(range(len(ids)))[::-1]
        assert [t.parent_config["configurable"]["checkpoint_id"] for t in listed[:-1]] == ids[-2::-1]
        assert [t.config["configurable"]["checkpoint_id"] for t in reader.list(config, before=at(ids[5]))] == ids[4::-1]
        for n, cid in enumerate(ids):
            got = reader.get_tuple(at(cid))
            assert got.checkpoint["channel_values"] == {"n": n} and got.metadata["step"] == n
            assert got.pending_writes == ([(f"task-{n}", "n", -n)] if n % 25 == 0 else [])
        assert reader.get_tuple(config).checkpoint["id"] == ids[-1]
        assert [t.checkpoint["id"] for t in reader.list(at(ids[1]))] == [ids[1]]
    saver.put_writes(at(ids[3]), [("n", "late")], "task-late")  # to a checkpoint long let go of
    assert saver.get_tuple(at(ids[3])).pending_writes == [("task-late", "n", "late")]
    fork = saver.put(at(ids[0]), {**empty_checkpoint(), "channel_values": {"n": "fork"}, "channel_versions": {"n": 99}},
                     {"step": 1}, {"n": 99})["configurable"]["checkpoint_id"]
    assert saver.get_tuple(config).checkpoint["id"] == fork
    assert saver.get_tuple(at(fork)).parent_config["configurable"]["checkpoint_id"] == ids[0]
    again = PfSaver(tmp_path / "repo")
    assert [t.checkpoint["id"] for t in again.list(config)] == [fork, *ids[::-1]]
    assert again.get_tuple(at(ids[3])).pending_writes == [("task-late", "n", "late")]
    assert again.get_tuple(at(ids[-1])).checkpoint["channel_values"] == {"n": len(ids) - 1}
