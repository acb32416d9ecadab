"""Tools: ``git_pf.tool`` records a side effect once and never runs its body again on replay
(docs/record.md, "Tools"). Real child processes, a real channel file, the real effects ledger."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import git_pf
from git_pf.core.errors import UsageError
from git_pf.layers.effects import ledger
from git_pf.runs.channel import ChannelReader, draws, effects, write_replay_file
from git_pf.runs.inject import child_env

SEND = """
import json, sys
import git_pf

@git_pf.tool(side_effect="irreversible")
def send(to, body, copies=1):
    with open(sys.argv[1], "a") as f:
        f.write(f"{to}:{body}\\n")
    return {"sent": to, "n": len(body)}

print(json.dumps(send(sys.argv[2], "hello")))
"""


def spawn(tmp_path: Path, code: str, mode: str, *args: str, channel="channel", replay: Path | None = None):
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_PF_")}
    env = child_env(base, mode=mode, channel=tmp_path / channel, replay_file=replay)
    return subprocess.run([sys.executable, str(script), *args], env=env, capture_output=True, text=True, timeout=60)


def events(tmp_path: Path, channel="channel") -> list[dict]:
    return ChannelReader(tmp_path / channel).new_events()


def recorded(tmp_path: Path, code: str, *args: str):
    proc = spawn(tmp_path, code, "record", *args, channel="recorded")
    assert proc.returncode == 0, proc.stderr
    got = events(tmp_path, "recorded")
    return proc, got


def replay_file(tmp_path: Path, got: list[dict], *, allow_effects=False, mode="replay") -> Path:
    path = tmp_path / "replay.json"
    write_replay_file(path, draws=draws(got), effects=effects(got), allow_effects=allow_effects, mode=mode)
    return path


def test_an_irreversible_tool_runs_once_and_never_on_replay(tmp_path):
    outbox = tmp_path / "outbox"
    first, got = recorded(tmp_path, SEND, str(outbox), "ann")
    assert outbox.read_text() == "ann:hello\n"
    (entry,) = effects(got)
    assert entry["tool"] == "send" and entry["side_effect_class"] == "irreversible"
    assert entry["args"] == {"to": "ann", "body": "hello", "copies": 1}
    assert entry["result"] == {"sent": "ann", "n": 5}
    assert ledger.verify(ledger.chain(effects(got), "channel")) == []  # the entries make a sound ledger

    proc = spawn(tmp_path, SEND, "replay", str(outbox), "ann", replay=replay_file(tmp_path, got))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout
    assert outbox.read_text() == "ann:hello\n"  # the body did not run again
    consumed = events(tmp_path)[-1]
    assert consumed["t"] == "consumed" and consumed["effects"] == consumed["effects_of"] == 1


def test_an_unrecorded_irreversible_call_diverges_unless_effects_are_allowed(tmp_path):
    outbox = tmp_path / "outbox"
    _, got = recorded(tmp_path, SEND, str(outbox), "ann")
    proc = spawn(tmp_path, SEND, "replay", str(outbox), "bob", replay=replay_file(tmp_path, got))
    assert proc.returncode == 86 and proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "git-pf: replay diverged: irreversible tool 'send' called with arguments the recorded ledger does not hold "
        "(replay with --allow-effects to let it run)"]
    (diverged,) = events(tmp_path)
    assert diverged["what"] == "effect" and diverged["index"] == 0
    assert diverged["expected"]["args"]["to"] == "ann" and diverged["got"]["args"]["to"] == "bob"
    assert outbox.read_text() == "ann:hello\n"

    (tmp_path / "channel").unlink()
    allowed = spawn(tmp_path, SEND, "replay", str(outbox), "bob", replay=replay_file(tmp_path, got, allow_effects=True))
    assert allowed.returncode == 0, allowed.stderr
    assert outbox.read_text() == "ann:hello\nbob:hello\n"
    assert [e["args"]["to"] for e in effects(events(tmp_path))] == ["bob"]


def test_run_mode_answers_the_prefix_from_the_ledger_and_runs_the_rest(tmp_path):
    code = SEND + "print(json.dumps(send('carl', 'again')))\n"
    outbox = tmp_path / "outbox"
    _, got = recorded(tmp_path, SEND, str(outbox), "ann")
    proc = spawn(tmp_path, code, "run", str(outbox), "ann", replay=replay_file(tmp_path, got, mode="run"))
    assert proc.returncode == 0, proc.stderr
    assert outbox.read_text() == "ann:hello\ncarl:again\n"
    assert [e["args"]["to"] for e in effects(events(tmp_path))] == ["carl"]


def test_the_context_manager_form_records_and_replays(tmp_path):
    code = """
    import sys
    import git_pf
    with git_pf.tool("deploy", side_effect="irreversible", args={"env": "prod"}) as call:
        if not call.replayed:
            open(sys.argv[1], "a").write("deployed\\n")
            call.result = {"version": 7}
    print(call.replayed, call.result)
    """
    log = tmp_path / "log"
    first, got = recorded(tmp_path, code, str(log))
    assert first.stdout == "False {'version': 7}\n"
    assert [(e["tool"], e["args"], e["result"]) for e in effects(got)] == [("deploy", {"env": "prod"}, {"version": 7})]
    proc = spawn(tmp_path, code, "replay", str(log), replay=replay_file(tmp_path, got))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "True {'version': 7}\n"
    assert log.read_text() == "deployed\n"


def test_a_result_that_is_not_json_is_kept_as_its_repr_and_cannot_be_replayed(tmp_path):
    code = """
    import git_pf
    @git_pf.tool(side_effect="idempotent")
    def make():
        return {1, 2}
    print(make())
    """
    _, got = recorded(tmp_path, code)
    (entry,) = effects(got)
    assert entry["result"] == "{1, 2}" and entry["result_repr"] is True
    proc = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, got))
    assert proc.returncode == 86
    assert "the recorded result of tool 'make' was not JSON" in proc.stderr


def test_a_secret_in_the_args_is_redacted_and_the_call_still_matches(tmp_path):
    code = """
    import sys
    import git_pf
    @git_pf.tool(side_effect="irreversible")
    def call_api(url, api_key):
        open(sys.argv[1], "a").write("called\\n")
        return "ok"
    print(call_api("http://127.0.0.1/x", api_key="sk-live-0123456789abcdefghijklmnop"))
    """
    log = tmp_path / "log"
    _, got = recorded(tmp_path, code, str(log))
    assert "sk-live-0123456789" not in (tmp_path / "recorded").read_text()
    proc = spawn(tmp_path, code, "replay", str(log), replay=replay_file(tmp_path, got))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ok\n" and log.read_text() == "called\n"


def test_a_call_that_raised_raises_again_on_replay(tmp_path):
    code = """
    import git_pf
    @git_pf.tool(side_effect="irreversible")
    def charge(amount):
        raise RuntimeError("card declined")
    try:
        charge(5)
    except Exception as e:
        print(type(e).__name__, e)
    """
    first, got = recorded(tmp_path, code)
    assert first.stdout == "RuntimeError card declined\n"
    assert effects(got)[0]["error"] == "RuntimeError: card declined"
    proc = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, got))
    assert proc.stdout == "RecordedToolError RuntimeError: card declined\n"


def test_outside_a_run_the_tool_just_runs(tmp_path, monkeypatch):
    monkeypatch.delenv("GIT_PF_MODE", raising=False)
    calls = []

    @git_pf.tool(side_effect="irreversible")
    def send(to):
        calls.append(to)
        return to.upper()

    @git_pf.tool
    def bare(x):
        return x + 1

    assert send("ann") == "ANN" and send("ann") == "ANN" and calls == ["ann", "ann"]
    assert bare(1) == 2 and send.__name__ == "send"
    with git_pf.tool("deploy", args={"env": "prod"}) as call:
        assert not call.replayed
        call.result = 3
    with pytest.raises(UsageError, match="side_effect"):
        git_pf.tool(side_effect="dangerous")


def test_an_async_tool_records_and_replays(tmp_path):
    code = """
    import asyncio, sys
    import git_pf
    @git_pf.tool(side_effect="irreversible")
    async def post(n):
        open(sys.argv[1], "a").write(f"{n}\\n")
        return [n, n * 2]
    print(asyncio.run(post(4)))
    """
    log = tmp_path / "log"
    first, got = recorded(tmp_path, code, str(log))
    assert first.stdout == "[4, 8]\n" and [e["result"] for e in effects(got)] == [[4, 8]]
    proc = spawn(tmp_path, code, "replay", str(log), replay=replay_file(tmp_path, got))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout and log.read_text() == "4\n"


def test_git_pf_tool_stays_light_in_the_agent_process():
    code = "import sys, git_pf\ngit_pf.tool\nprint(sorted(m for m in ('pygit2', 'typer', 'zstandard') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout == "[]\n", proc.stderr


def test_draws_inside_a_tool_body_are_not_part_of_the_replay(tmp_path):
    code = """
    import asyncio, sys, time, uuid
    import git_pf
    @git_pf.tool(side_effect="irreversible")
    def post(text):
        stamp = f"{uuid.uuid4()} {time.time()}"
        open(sys.argv[1], "a").write(stamp + "\\n")
        return text.upper()
    @git_pf.tool(side_effect="irreversible")
    async def apost(text):
        return f"{text} {uuid.uuid4()}"
    with git_pf.tool("stamp", args={}) as call:
        if not call.replayed:
            call.result = str(uuid.uuid1())
    print(time.time(), post("a"), asyncio.run(apost("b")), call.result, time.time(), uuid.uuid4())
    """
    log = tmp_path / "log"
    first, got = recorded(tmp_path, code, str(log))
    fns = [d["fn"] for d in draws(got)]  # the tool bodies' uuid4, uuid1 and time.time are no draws
    assert fns.count("uuid.uuid4") == 1 and "uuid.uuid1" not in fns and fns[-3:] == ["time.time", "time.time", "uuid.uuid4"]
    proc = spawn(tmp_path, code, "replay", str(log), replay=replay_file(tmp_path, got))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == first.stdout and len(log.read_text().splitlines()) == 1


CONCURRENT = """
import sys, threading
from pathlib import Path
import git_pf

world, both = Path(sys.argv[1]), threading.Barrier(2)

@git_pf.tool(side_effect="idempotent")
def write(name, overlap):
    if overlap:
        both.wait(10)  # the two bodies surely run at the same time
    (world / name).write_text(name)
    if overlap:
        both.wait(10)
    return name

write("alone.txt", False)
threads = [threading.Thread(target=write, args=(n, True)) for n in ("a.txt", "b.txt")]
[t.start() for t in threads]
[t.join() for t in threads]
"""


def test_a_calls_world_change_is_kept_unless_calls_overlap(tmp_path):
    world = tmp_path / "world"
    world.mkdir()
    script = tmp_path / "child.py"
    script.write_text(CONCURRENT)
    base = {k: v for k, v in os.environ.items() if not k.startswith("GIT_PF_")}
    env = dict(child_env(base, mode="record", channel=tmp_path / "channel", replay_file=None), GIT_PF_WORLD=str(world))
    proc = subprocess.run([sys.executable, str(script), str(world)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    entries = {e["args"]["name"]: e for e in effects(events(tmp_path))}
    alone = entries["alone.txt"]["world"]
    assert alone == [{"path": "alone.txt", "mode": "100644",
                      "blob": subprocess.run(["git", "hash-object", str(world / "alone.txt")], capture_output=True,
                                             text=True, check=True).stdout.strip()}]
    assert entries["a.txt"]["world"] == entries["b.txt"]["world"] == {"unknown": "concurrent calls"}
