"""``git pf replay``: a recorded run served back to the same agent in a fresh process, checked request by
request. Real components: fake LLM servers on 127.0.0.1, the agent on the real SDKs, the real CLI."""
from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from git_pf.testing.fakellm import FakeLLM, routed
from mount_helpers import requires_fuse
from runs_helpers import SCRIPT, agent_cmd, agent_line, record, report, tape


def replay(run_pf, root, rev, api, world, *extra, pf_args=(), effects=None, check=False):
    return run_pf("replay", rev, "--fs-root", world, "--json", *pf_args, "--",
                  *agent_cmd(api, world, *extra, effects=effects), cwd=root, check=check)


# Every api, JSON and streamed, sync and async, concurrent requests (threads and asyncio.gather).
CASES = [("openai.chat", ("--concurrent",)), ("openai.chat", ("--stream", "--async")),
         ("openai.responses", ()), ("openai.responses", ("--stream", "--concurrent")),
         ("anthropic", ("--async",)), ("anthropic", ("--stream", "--async", "--concurrent"))]


@pytest.mark.parametrize("api,extra", CASES, ids=[f"{a}{''.join(e)}" for a, e in CASES])
def test_replay_is_bit_exact_and_the_irreversible_tool_does_not_run_again(repo, run_pf, tmp_path, api, extra):
    root, fx = repo.git_dir.parent, tmp_path / "effects.log"
    slow = 150 if "--concurrent" in extra else 0  # so the concurrent pair is surely in flight together
    with FakeLLM(routed(SCRIPT, {"critic:": "Looks fine."}), delay_ms=slow) as fake:
        rec = record(run_pf, root, fake, api, tmp_path / "sb", "--steps", "3", *extra, effects=fx)
        asked = len(fake.requests)
        assert fx.read_text().count("\n") == 1  # the agent's own notify after step 2 ran once
        played = replay(run_pf, root, "run", api, tmp_path / "again", "--steps", "3", *extra, effects=fx)
        assert len(fake.requests) == asked == 3  # nothing reached the server
    assert played.returncode == 0, played.stderr
    out = report(played.stdout)
    assert out["bit_exact"] is True and out["mismatch"] is None
    assert out["exchanges"] == {"served": asked, "of": asked}
    assert out["draws"]["consumed"] == out["draws"]["of"] > 0
    assert out["effects"] == {"replayed": 1, "of": 1}
    assert fx.read_text().count("\n") == 1  # the body of notify did not run on replay
    assert agent_line(played.stdout) == agent_line(rec.stdout)  # same replies, draws, tools and files
    exchanges = [e for e in tape(root, "refs/pf/heads/run") if e["kind"] == "exchange"]
    batches = sorted((e["arrival"], e["batch"]) for e in exchanges)
    # two requests in flight together share a batch; otherwise each exchange is its own
    assert batches == ([(1, 1), (2, 2), (3, 2)] if "--concurrent" in extra else [(1, 1), (2, 2), (3, 3)])


def test_a_429_replays_as_429_and_the_sdk_retries_again(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(SCRIPT, fail_first=True) as fake:
        rec = record(run_pf, root, fake, "anthropic", tmp_path / "sb", "--steps", "2", effects=tmp_path / "fx")
        assert [r["status"] for r in fake.requests] == [429, 200, 200]
        played = replay(run_pf, root, "run", "anthropic", tmp_path / "again", "--steps", "2", effects=tmp_path / "fx")
        assert len(fake.requests) == 3
    out = report(played.stdout)
    assert out["bit_exact"] is True and out["exchanges"] == {"served": 3, "of": 3}
    assert agent_line(played.stdout) == agent_line(rec.stdout)
    first = json.loads(run_pf("show", "run", "--step", "1", "--json", cwd=root).stdout)
    assert first["step"] == 1


def test_a_one_byte_change_in_a_prompt_is_caught_at_its_step(repo, run_pf, tmp_path):
    root, world = repo.git_dir.parent, tmp_path / "again"
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb", effects=tmp_path / "fx")
    # step 2's reply reads task.md, so step 3's request carries it: change one byte of it in the world
    cmd = " ".join(f"'{a}'" for a in agent_cmd("openai.chat", world, effects=tmp_path / "fx"))
    proc = run_pf("replay", "run", "--fs-root", world, "--no-world-check", "--", "sh", "-c",
                  f"sed -i 's/notes\\//notes!/' '{world}/task.md' && exec {cmd}", cwd=root, check=False)
    assert proc.returncode == 1
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("git pf")]  # the agent's own error aside
    assert line.startswith("git pf: error: replay mismatch: step 3: the request differs") and "$.messages" in line
    assert "Traceback" not in proc.stderr
    proc = run_pf("replay", "run", "--fs-root", tmp_path / "third", "--json", "--no-world-check", "--", "sh", "-c",
                  f"sed -i 's/notes\\//notes!/' '{tmp_path / 'third'}/task.md' && exec "
                  + cmd.replace(str(world), str(tmp_path / "third")), cwd=root, check=False)
    out = report(proc.stdout)
    assert proc.returncode == 1 and out["bit_exact"] is False and out["mismatch"]["step"] == 3
    [d] = [d for d in out["mismatch"]["diff"] if "notes" in str(d["recorded"])]
    assert "notes/" in d["recorded"] and "notes!" in d["live"]


def test_a_tape_from_another_agent_and_other_bad_input(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb", "--steps", "2", effects=tmp_path / "fx")
    other = replay(run_pf, root, "run", "anthropic", tmp_path / "w1", "--steps", "2", effects=tmp_path / "fx")
    assert other.returncode == 2
    [line] = [l for l in other.stderr.splitlines() if l.startswith("git pf:")]
    assert line.startswith("git pf: error: the tape of 'run' was recorded from another agent: before its first request")
    for args, code, words in (
            (("replay", "nope", "--", "true"), 2, "nope"),
            (("replay", "run", "--ignore-field", "messages", "--", "true"), 2, "--ignore-field"),
            (("replay", "run", "--", "no-such-agent-command"), 127, "command not found"),
            (("replay", "run", "--fs-root", tmp_path / "sb", "--", "true"), 2, "empty"),
            (("show", "run", "--step", "9"), 2, "9")):
        proc = run_pf(*args, cwd=root, check=False)
        assert proc.returncode == code, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--name", "plain", cwd=root)
    proc = run_pf("replay", "plain", "--", "true", cwd=root, check=False)
    assert proc.returncode == 2 and "not a recorded run" in proc.stderr


def test_a_hostile_tape_is_refused_before_anything_is_served(repo, run_pf, tmp_path):
    """A header that would split the response the agent gets is damaged data: exit 3, one line."""
    entry = {"v": 2, "kind": "exchange", "step": 1, "arrival": 1, "batch": 1, "api": "openai.chat", "ms": 1,
             "request": {"method": "POST", "path": "/v1/chat/completions", "query": "", "headers": {},
                         "body": {"text": "{}"}},
             "response": {"status": 200, "headers": {"content-type": "text/plain\r\nx-evil: 1"},
                          "body": {"text": "hi"}, "chunks": None}, "draws": []}
    (tmp_path / "tape.jsonl").write_text(json.dumps(entry) + "\n")
    (tmp_path / "sb").mkdir()
    root = repo.git_dir.parent
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--name", "evil", "--tape", tmp_path / "tape.jsonl", cwd=root)
    proc = run_pf("replay", "evil", "--fs-root", tmp_path / "w", "--", "true", cwd=root, check=False)
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1 and "control characters" in proc.stderr
    assert not (tmp_path / "w").exists()


STREAM_ONCE = ("import json, os, time, urllib.request\n"
               "body = json.dumps({'model': 'm', 'stream': True, 'messages': [{'role': 'user', 'content': 'hi'}]})\n"
               "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=body.encode(),\n"
               "                             method='POST', headers={'content-type': 'application/json'})\n"
               "t = time.perf_counter()\n"
               "resp = urllib.request.urlopen(req)\n"
               "data = resp.read()\n"
               "print(json.dumps({'s': time.perf_counter() - t, 'status': resp.status, 'events': data.count(b'data: ')}))\n")


def test_realtime_keeps_the_recorded_chunk_delays(repo, run_pf, tmp_path):
    import sys

    root = repo.git_dir.parent
    child = ["--", sys.executable, "-c", STREAM_ONCE]
    with FakeLLM(["one two three four"], chunk_delay_ms=60) as fake:
        live = json.loads(run_pf("record", "--name", "s", "--upstream", fake.url, *child, cwd=root).stdout)
    fast = json.loads(run_pf("replay", "s", "--fs-root", tmp_path / "w1", *child, cwd=root).stdout)
    slow = json.loads(run_pf("replay", "s", "--realtime", "--fs-root", tmp_path / "w2", *child, cwd=root).stdout)
    assert live["status"] == fast["status"] == slow["status"] == 200
    assert live["events"] == fast["events"] == slow["events"] > 3
    assert live["s"] > 0.2 and slow["s"] > 0.8 * live["s"] and fast["s"] < 0.5 * live["s"]


@requires_fuse
def test_replay_in_a_mount_of_the_first_step(repo, run_pf, tmp_path):
    root, mnt = repo.git_dir.parent, tmp_path / "mnt"
    with FakeLLM(SCRIPT) as fake:
        rec = record(run_pf, root, fake, "openai.chat", tmp_path / "sb", "--steps", "3", effects=tmp_path / "fx")
    try:
        played = run_pf("replay", "run", "--mount", mnt, "--json", "--",
                        *agent_cmd("openai.chat", mnt, "--steps", "3", effects=tmp_path / "fx"), cwd=root)
    finally:
        subprocess.run(["fusermount3", "-u", "-q", str(mnt)], capture_output=True)  # only if the test failed
    out = report(played.stdout)
    assert out["bit_exact"] is True and out["world"] == str(mnt.resolve())
    assert agent_line(played.stdout) == agent_line(rec.stdout)
    assert str(mnt.resolve()) not in Path("/proc/self/mounts").read_text()  # unmounted, changes discarded
    assert not any(mnt.iterdir())
    proc = run_pf("replay", "run", "--mount", mnt, "--fs-root", tmp_path / "w", "--", "true", cwd=root, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
