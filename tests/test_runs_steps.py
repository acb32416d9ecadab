"""Step images of a recorded run: StepWriter, step addressing (log, show --step, --at-step),
run_plan, and fork --at-step; on real repositories and the real git-pf command."""
from __future__ import annotations

import json
import subprocess
import threading
import time
from pathlib import Path

import pygit2
import pytest

from git_pf.image import manifest as img
from git_pf.core.errors import DataError, UnknownRevision, UsageError
from git_pf.layers.trace import exchange, tape
from git_pf.runs import steps, stepworld
from git_pf.ops.snapshot_inputs import TraceInput

SECRET = "sk-proj-0123456789abcdefghijklmnopqrstuv"


def chat(arrival: int, prompt: str, reply: str, batch: int | None = None) -> dict:
    """A v2 OpenAI chat exchange as the proxy hands it to ``completed`` (no step, no draws)."""
    request = {"model": "gpt-test", "messages": [{"role": "user", "content": prompt}]}
    response = {"id": f"chatcmpl-{arrival}", "object": "chat.completion", "model": "gpt-test",
                "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": reply}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}
    return {"v": 2, "kind": "exchange", "arrival": arrival, "batch": batch or arrival, "api": "openai.chat",
            "request": {"method": "POST", "path": "/v1/chat/completions", "query": "",
                        "headers": {"content-type": "application/json"},
                        "body": exchange.body(json.dumps(request).encode())},
            "response": {"status": 200, "headers": {"content-type": "application/json"},
                         "body": exchange.body(json.dumps(response).encode()), "chunks": None},
            "ms": 1.5}


def emit(writer: steps.StepWriter, *events: dict) -> None:
    """What the child's hook does: one JSON line per event appended to the channel."""
    with open(writer.channel, "a") as f:
        f.writelines(json.dumps(e) + "\n" for e in events)


def effect(tool: str, n: int) -> dict:
    return {"t": "effect", "entry": {"tool": tool, "args": {"n": n}, "result": n * 2, "ts": n,
                                     "side_effect_class": "irreversible", "idempotency_key": f"{tool}-{n}"}}


def draw(v: float) -> dict:
    return {"t": "draw", "fn": "time.time", "v": v}


@pytest.fixture
def sandbox(tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "notes.txt").write_text("start\n")
    return sb


def record(repo, sandbox, prompts=("one", "two", "three"), exit_code=0) -> dict:
    """A three-step run on branch ``run``: ids of each step image and of the final one."""
    w = steps.StepWriter(repo, "run", sandbox)
    ids = {0: w.start().id}
    for i, prompt in enumerate(prompts, 1):
        emit(w, draw(float(i)), effect("send", i))
        token = w.arrived(i)
        (sandbox / "notes.txt").write_text(f"after request {i}\n")  # after arrival: belongs to the next step
        ids[i] = w.completed(token, chat(i, prompt, f"reply {i}")).id
    emit(w, draw(99.0))
    ids["final"] = w.finish(exit_code).id
    w.close()
    assert not w.channel.exists()
    return ids


def world_file(repo, image_id: str, name: str) -> bytes:
    image = img.read_image(repo.git, image_id)
    return img.read_file(repo.git, img.subtree(repo.git, image.tree, img.WORLD_FS), name.encode())


def test_each_exchange_is_a_step_image_with_the_world_at_its_request(repo, sandbox):
    ids = record(repo, sandbox)
    git = repo.git
    for n in (1, 2, 3):
        image = img.read_image(git, ids[n])
        assert image.trailer("Pf-Step") == [str(n)] and image.parents == (ids[n - 1],)
        entries = tape.read(git, image.tree)
        assert [e["step"] for e in entries] == list(range(1, n + 1))
        assert entries[-1]["draws"] == [{"fn": "time.time", "v": float(n)}]
        messages = [json.loads(l) for l in img.read_file(git, image.tree, img.TRACE_MESSAGES).splitlines()]
        assert messages[0]["content"] == ["one", "two", "three"][n - 1]
        assert messages[-1]["role"] == "assistant" and messages[-1]["content"] == f"reply {n}"
        ledger = img.read_file(git, image.tree, img.EFFECTS_LEDGER).splitlines()
        assert [json.loads(l)["idempotency_key"] for l in ledger] == [f"send-{i}" for i in range(1, n + 1)]
    # the world of step N is the sandbox when request N arrived, not when its reply came
    assert world_file(repo, ids[0], "notes.txt") == b"start\n"
    assert world_file(repo, ids[1], "notes.txt") == b"start\n"
    assert world_file(repo, ids[3], "notes.txt") == b"after request 2\n"
    final = img.read_image(git, ids["final"])
    assert final.trailers[-2:] == (("Pf-Step", "3"), ("Pf-Run-Exit", "0"))
    assert world_file(repo, ids["final"], "notes.txt") == b"after request 3\n"
    end = tape.read(git, final.tree)[-1]
    assert end == {"v": 2, "kind": "end", "step": 3, "draws": [{"fn": "time.time", "v": 99.0}], "exit": 0}


def test_steps_are_addressed_by_number(repo, sandbox, run_pf):
    ids = record(repo, sandbox)
    git = repo.git
    assert steps.at_step(git, "run", 3) == ids[3]  # the step image, not the final one that repeats step 3
    assert steps.at_step(git, "run", 0) == ids[0] and steps.at_step(git, "run~2", 1) == ids[1]
    with pytest.raises(UnknownRevision, match="'run' has no step 7"):
        steps.at_step(git, "run", 7)
    cwd = repo.git_dir.parent
    log = json.loads(run_pf("log", "run", "--json", cwd=cwd).stdout)
    assert [(i["id"], i["step"]) for i in log] == [(ids["final"], 3), (ids[3], 3), (ids[2], 2), (ids[1], 1), (ids[0], 0)]
    oneline = run_pf("log", "run", "--oneline", cwd=cwd).stdout.splitlines()
    assert oneline[1] == f"{ids[3][:12]} [step 3] step 3: openai.chat 200"
    assert "Step:   2" in run_pf("log", "run", "-n", "3", cwd=cwd).stdout
    shown = json.loads(run_pf("show", "run", "--step", "2", "--json", cwd=cwd).stdout)
    assert shown["id"] == ids[2] and shown["step"] == 2
    assert json.loads(run_pf("show", "run", "--at-step", "1", "--json", cwd=cwd).stdout)["id"] == ids[1]
    bad = run_pf("show", "run", "--step", "9", cwd=cwd, check=False)
    assert bad.returncode == 2 and bad.stderr == "git pf: error: 'run' has no step 9\n"
    out = cwd.parent / "out"
    run_pf("checkout", "run", "--at-step", "3", "--into", out, cwd=cwd)
    assert (out / "notes.txt").read_text() == "after request 2\n"
    stat = run_pf("diff", "run", "--at-step", "3", "--json", cwd=cwd).stdout  # what step 3 changed
    d = json.loads(stat)
    assert d["world"]["changed"] == ["notes.txt"] and d["trace"]["exchanges_added"] == 1
    bad = run_pf("diff", "run", "--at-step", "0", cwd=cwd, check=False)
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1


def test_run_plan_orders_draws_by_arrival_and_steps_by_completion(repo, sandbox):
    w = steps.StepWriter(repo, "conc", sandbox)
    first = w.start().id
    emit(w, draw(1.0))
    t1 = w.arrived(1)
    emit(w, draw(2.0))
    t2 = w.arrived(2)
    w.completed(t2, chat(2, "second", "r2", batch=1))  # arrival 2 completes first: step 1
    step2 = w.completed(t1, chat(1, "first", "r1", batch=1)).id
    emit(w, draw(3.0))
    tip = w.finish(5).id
    w.close()
    plan = steps.run_plan(repo.git, "conc")
    assert plan.first == first and plan.tip == tip and plan.start_image == first and plan.fork_step is None
    assert [(e["step"], e["arrival"]) for e in plan.entries] == [(1, 2), (2, 1)]
    assert [d["v"] for d in plan.draws] == [1.0, 2.0, 3.0] and plan.end["exit"] == 5
    assert steps.at_step(repo.git, "conc", 2) == step2


def test_writer_is_thread_safe(repo, sandbox):
    w = steps.StepWriter(repo, "threads", sandbox)
    w.start()

    def one(i: int) -> None:
        w.completed(w.arrived(i), chat(i, f"q{i}", f"r{i}"))

    threads = [threading.Thread(target=one, args=(i,)) for i in range(1, 9)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    w.close()
    entries = tape.read(repo.git, repo.resolve("threads").tree)
    assert sorted(e["step"] for e in entries) == list(range(1, 9))
    assert sorted(e["arrival"] for e in entries) == list(range(1, 9))


def test_a_step_reads_only_the_files_the_agent_changed(repo, tmp_path):
    sb = tmp_path / "big"
    for d in range(5):
        (sb / f"d{d}").mkdir(parents=True)
        for f in range(40):
            (sb / f"d{d}" / f"f{f}.txt").write_text(f"{d}/{f}\n")
    time.sleep(0.15)  # past the stat cache's racy window, as an agent's files mostly are
    w = steps.StepWriter(repo, "quiet", sb)
    assert w.start().manifest["layers"]["world"]["files"] == 200
    assert w.arrived(1).world.stats.files_read == 0
    (sb / "d0" / "f0.txt").write_text("changed\n")
    token = w.arrived(2)
    assert token.world.stats.files == 200 and token.world.stats.files_read == 1
    w.close()


def test_the_watched_world_is_the_full_capture_after_any_change(repo, tmp_path):
    sb = tmp_path / "w"
    (sb / "a" / "deep").mkdir(parents=True)
    (sb / "a" / "deep" / "x.txt").write_text("x\n")
    (sb / "c").mkdir()
    (sb / "c" / "y.txt").write_text("y\n")
    w = steps.StepWriter(repo, "watched", sb)
    w.start()
    changes = [
        lambda: (sb / "a" / "deep" / "x.txt").write_text("x2\n"),  # a file two levels down
        lambda: (sb / "a").rename(sb / "b"),
        lambda: (tmp_path / "ext" / "deep").mkdir(parents=True) or (tmp_path / "ext").rename(sb / "a"),  # moved in
        lambda: ((sb / "a").rename(sb / "gone"), (sb / "c").rename(sb / "a")),  # a watched one over an old name
        lambda: ((sb / "n" / "m").mkdir(parents=True), (sb / "n" / "m" / "z.txt").write_text("z\n")),  # new tree
        lambda: ((sb / "b" / "deep" / "x.txt").unlink(), (sb / "b" / "deep").rmdir(), (sb / "b" / "deep").mkdir()),
        lambda: (sb / "n" / "m" / "z.txt").chmod(0o755),  # mode only
    ]
    for i, change in enumerate(changes, 1):
        change()
        token = w.arrived(i)
        full = repo.snapshot(sb, name=f"full-{i}", allow_empty=True)  # a walk of every directory
        assert token.world.tree == img.subtree(repo.git, full.image.tree, img.WORLD_FS), f"change {i}"
    w.close()


def test_without_its_watcher_a_step_walks_the_whole_sandbox(repo, tmp_path):
    sb = tmp_path / "nw"
    (sb / "d").mkdir(parents=True)
    (sb / "d" / "f.txt").write_text("old\n")
    world = stepworld.LiveWorld(repo, sb, ())
    world.capture(repo, None)
    world.watch.close()  # as when there is no inotify, its watch limit is reached or its queue overflowed
    (sb / "d" / "f.txt").write_text("new\n")
    cap = world.capture(repo, None)
    full = repo.snapshot(sb, name="full")
    assert cap.tree == img.subtree(repo.git, full.image.tree, img.WORLD_FS) and cap.stats.files_read == 1
    world.save()


def test_a_run_needs_a_new_branch_and_a_secret_never_reaches_git(repo, sandbox, tmp_path):
    record(repo, sandbox)
    with pytest.raises(UsageError, match="branch 'run' already exists"):
        steps.StepWriter(repo, "run", sandbox).start()
    w = steps.StepWriter(repo, "secret", None)
    w.start()
    entry = chat(1, f"use key {SECRET}", "ok")
    entry["request"]["headers"]["x-api-key"] = SECRET
    w.completed(w.arrived(1), entry)
    w.finish(0)
    w.close()
    dump = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo.git_dir,
                          capture_output=True).stdout
    assert SECRET.encode() not in dump and b"reply 1" in dump


def test_fork_at_step_shares_the_earlier_steps_and_keeps_the_world(repo, sandbox, run_pf, tmp_path):
    ids = record(repo, sandbox)
    cwd = repo.git_dir.parent
    answer = tmp_path / "answer.txt"
    answer.write_text("a better reply")
    out = run_pf("fork", "run", "--at-step", "2", "--response", answer, "--json", cwd=cwd).stdout
    made = json.loads(out)
    assert made["name"] == "run-step2-1" and made["forked_from"] == ids[2] and made["step"] == 2
    git = repo.git
    fork = img.read_image(git, made["id"])
    assert fork.parents == (ids[1],) and fork.trailer("Pf-Step") == ["2"]
    assert img.subtree(git, fork.tree, img.WORLD_FS) == img.subtree(git, repo.resolve(ids[2]).tree, img.WORLD_FS)
    entries = tape.read(git, fork.tree)
    assert entries[0] == tape.read(git, repo.resolve(ids[1]).tree)[0] and len(entries) == 2
    body = json.loads(exchange.response_bytes(entries[1]["response"]))
    assert body["choices"][0]["message"]["content"] == "a better reply" and entries[1]["draws"][0]["v"] == 2.0
    messages = img.read_file(git, fork.tree, img.TRACE_MESSAGES).decode()
    assert "a better reply" in messages and "reply 2" not in messages
    assert fork.manifest["layers"]["tape"] == {"exchanges": 2}
    log = json.loads(run_pf("log", "run-step2-1", "--json", cwd=cwd).stdout)
    assert [i["id"] for i in log] == [made["id"], ids[1], ids[0]] and [i["step"] for i in log] == [2, 1, 0]
    plan = steps.run_plan(git, "run-step2-1")
    assert plan.fork_step == 2 and plan.start_image == made["id"] and plan.first == ids[0]
    # the same step again takes the next name; --edit takes the reply from the editor
    editor = f"printf 'edited reply' >"
    second = run_pf("fork", "run", "--at-step", "2", "--edit", cwd=cwd, env={"GIT_EDITOR": editor}).stdout.split()
    assert second[1] == "run-step2-2"
    edited = tape.read(git, repo.resolve("run-step2-2").tree)[1]
    assert json.loads(exchange.response_bytes(edited["response"]))["choices"][0]["message"]["content"] == "edited reply"
    compare = json.loads(run_pf("diff", "run", "run-step2-1", "--at-step", "2", "--json", cwd=cwd).stdout)
    assert compare["world"]["changed"] == [] and compare["trace"]["rewritten"]


@pytest.mark.parametrize("args, code, text", [
    (["--at-step", "0"], 2, "step 0 is the world before the run"),
    (["--at-step", "9"], 2, "'run' has no step 9"),
    (["--at-step", "1", "--response", "missing.txt"], 2, "--response: no such file"),
    (["--response", "x.txt"], 2, "--response and --edit need --at-step N"),
    (["--at-step", "1", "-n", "2"], 2, "takes no -n"),
    (["--at-step", "1", "--name", "run"], 2, "branch 'run' already exists"),
    (["--at-step", "1", "--edit"], 2, "the editor"),
])
def test_fork_at_step_refuses_bad_input_in_one_line(repo, sandbox, run_pf, args, code, text):
    record(repo, sandbox)
    proc = run_pf("fork", "run", *args, cwd=repo.git_dir.parent, check=False, env={"GIT_EDITOR": "false"})
    assert proc.returncode == code and text in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_run_plan_refuses_what_is_no_recorded_run(repo, sandbox, tmp_path):
    repo.snapshot(sandbox, name="plain")
    with pytest.raises(UsageError, match="not a recorded run"):
        steps.run_plan(repo.git, "plain")
    repo.snapshot(sandbox, name="v1", trace=TraceInput(tape=[{"any": "object"}]),
                  allow_empty=True)
    with pytest.raises(UsageError, match="not a recorded run"):
        steps.run_plan(repo.git, "v1")
    bad = dict(chat(1, "q", "r"), step=1, draws=[], batch=7)  # a batch after its own arrival: damaged
    repo.snapshot(sandbox, name="damaged", trace=TraceInput(tape=[bad]), allow_empty=True)
    with pytest.raises(DataError, match="batch"):
        steps.run_plan(repo.git, "damaged")


def test_a_long_run_keeps_no_object_cache_that_grows_with_it(repo):
    """Each step reads back objects of the step before it, once: libgit2's object cache only ever
    filled with them, and the recorder's memory grew with the run (docs/record.md, "Memory")."""
    w = steps.StepWriter(repo, "long", None)
    w.start()

    def run(first: int, last: int) -> None:
        for i in range(first, last + 1):
            w.completed(w.arrived(i), chat(i, f"prompt {i}", f"reply {i}"))
    run(1, 10)
    cached = pygit2.settings.cached_memory[0]
    run(11, 60)
    assert pygit2.settings.cached_memory[0] <= cached
    assert steps.at_step(repo.git, "long", 60) == w._tip
    w.finish(0)
    w.close()
