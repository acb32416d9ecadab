"""Record / replay edge cases: the temporary world of a replay, a prompt proxy shutdown, a damaged tape
seen by fsck and show, secrets in tool calls, draws before a request the upstream never answered.
Real components: the real ``git-pf``, Python children talking HTTP to fake servers on 127.0.0.1."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from git_pf.testing.fakellm import FakeLLM

# A child that draws, asks the model once, writes what it heard into its world and, with an argument,
# then waits (so it can be interrupted while the replay runs).
ASK_ONCE = ("import json, os, sys, time, urllib.request, uuid\n"
            "tag = uuid.uuid4().hex\n"
            "body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi ' + tag}]})\n"
            "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=body.encode(),\n"
            "                             method='POST', headers={'content-type': 'application/json'})\n"
            "reply = json.loads(urllib.request.urlopen(req).read())['choices'][0]['message']['content']\n"
            "open(os.path.join(os.environ['GIT_PF_WORLD'], 'heard.txt'), 'w').write(reply)\n"
            "print(json.dumps({'tag': tag, 'reply': reply}), flush=True)\n"
            "if len(sys.argv) > 1:\n"
            "    open(sys.argv[1], 'w').close()\n"
            "    time.sleep(60)\n")


def _record_once(run_pf, root: Path, tmp_path: Path, name: str = "r") -> None:
    (tmp_path / "sb").mkdir(exist_ok=True)
    with FakeLLM(["hello there"]) as fake:
        run_pf("record", "--name", name, "--fs-root", tmp_path / "sb", "--upstream", fake.url, "--",
               sys.executable, "-c", ASK_ONCE, cwd=root)


def _report(stdout: str) -> dict:
    return json.loads(stdout[stdout.index("\n{") + 1:])


# -- 1. the temporary world --------------------------------------------------------------------------

def test_replay_removes_its_temporary_world_unless_kept(repo, run_pf, tmp_path):
    root, tmp = repo.git_dir.parent, tmp_path / "tmp"
    tmp.mkdir()
    _record_once(run_pf, root, tmp_path)
    subprocess.run(["git", "config", "pf.worldCache.maxWorlds", "0"], cwd=root, check=True)  # no world kept
    env = {"TMPDIR": str(tmp)}
    played = run_pf("replay", "r", "--json", "--", sys.executable, "-c", ASK_ONCE, cwd=root, env=env)
    out = _report(played.stdout)
    assert out["bit_exact"] is True and out["world"] is None
    assert os.listdir(tmp) == []  # neither the world nor the channel stays
    mismatch = run_pf("replay", "r", "--json", "--", sys.executable, "-c", ASK_ONCE.replace("'hi '", "'ho '"),
                      cwd=root, env=env, check=False)
    assert mismatch.returncode == 1 and "replay mismatch: step 1" in mismatch.stderr
    assert os.listdir(tmp) == []  # a failed replay removes it too
    kept = run_pf("replay", "r", "--keep-world", "--json", "--", sys.executable, "-c", ASK_ONCE, cwd=root, env=env)
    world = Path(_report(kept.stdout)["world"])
    assert world.parent == tmp.resolve() and (world / "heard.txt").read_text() == "hello there"
    human = run_pf("replay", "r", "--keep-world", "--", sys.executable, "-c", ASK_ONCE, cwd=root, env=env)
    assert "its world is kept in " + str(tmp.resolve()) in human.stderr
    proc = run_pf("replay", "r", "--keep-world", "--fs-root", tmp_path / "w", "--", "true", cwd=root, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--keep-world" in proc.stderr


def test_an_interrupted_replay_removes_its_temporary_world(repo, run_pf, tmp_path):
    root, tmp, ready = repo.git_dir.parent, tmp_path / "tmp", tmp_path / "ready"
    tmp.mkdir()
    _record_once(run_pf, root, tmp_path)
    subprocess.run(["git", "config", "pf.worldCache.maxWorlds", "0"], cwd=root, check=True)  # no world kept
    for sig in (signal.SIGTERM, signal.SIGINT):
        ready.unlink(missing_ok=True)
        env = dict(os.environ, TMPDIR=str(tmp), PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
        proc = subprocess.Popen(["git-pf", "replay", "r", "--", sys.executable, "-c", ASK_ONCE, str(ready)],
                                cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while not ready.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert ready.exists(), proc.communicate()
        assert any(n.startswith("pf-world-") for n in os.listdir(tmp))  # the child runs in it now
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + sig, err
        assert os.listdir(tmp) == [], sig


# -- 2. stopping the proxy -----------------------------------------------------------------------------

class _Hello:
    def handle(self, request, reply) -> None:
        reply.whole(200, [("Content-Type", "text/plain")], b"hello")


def test_the_proxy_stops_promptly_after_serving():
    """A replay ends by stopping its proxy: that must not wait out a long poll (it was up to 0.5 s)."""
    import urllib.request

    from git_pf.runs.proxy import Proxy

    stops = []
    for _ in range(8):
        proxy = Proxy(_Hello())
        with proxy:
            assert urllib.request.urlopen(proxy.url + "/openai/v1/models", timeout=10).read() == b"hello"
            t = time.perf_counter()
        stops.append(time.perf_counter() - t)
    assert max(stops) < 0.25, stops


# -- 3. a damaged tape seen by fsck, show and merges ----------------------------------------------------

def _exchange(step: int, arrival: int, batch: int, content_type: str = "text/plain") -> dict:
    return {"v": 2, "kind": "exchange", "step": step, "arrival": arrival, "batch": batch, "api": "openai.chat",
            "ms": 1, "request": {"method": "POST", "path": "/v1/chat/completions", "query": "", "headers": {},
                                 "body": {"text": "{}"}},
            "response": {"status": 200, "headers": {"content-type": content_type}, "body": {"text": "hi"}},
            "draws": []}


def _image_with_tape(run_pf, root: Path, tmp_path: Path, name: str, entries: list[dict]) -> None:
    (tmp_path / "sb").mkdir(exist_ok=True)
    (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--name", name, "--tape", tmp_path / f"{name}.jsonl", cwd=root)


def test_fsck_show_and_merge_look_inside_the_tape(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    _image_with_tape(run_pf, root, tmp_path, "evil", [_exchange(1, 1, 1)])
    run_pf("branch", "clean", "evil", cwd=root)
    _image_with_tape(run_pf, root, tmp_path, "evil", [_exchange(1, 1, 1, "text/plain\r\nx-evil: 1"),
                                                       _exchange(2, 2, 2), _exchange(3, 3, 9)])
    _image_with_tape(run_pf, root, tmp_path, "twice", [_exchange(1, 1, 1), _exchange(1, 2, 2)])
    proc = run_pf("fsck", cwd=root, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    lines = [l for l in (proc.stdout + proc.stderr).splitlines() if "trace/tape" in l]
    assert len(lines) == 3, proc.stdout + proc.stderr  # each bad entry of evil, and the step twice's tape holds twice
    assert any("trace/tape/00000000-" in l and "control characters" in l for l in lines)
    assert any("trace/tape/00000002-" in l and "batch must not be after its arrival" in l for l in lines)
    assert any("trace/tape: step 1 is recorded twice" in l for l in lines)
    for args in (("show", "evil"), ("merge", "evil", "--into", "clean")):  # the branch is not moved onto it
        proc = run_pf(*args, cwd=root, check=False)
        assert proc.returncode == 3 and proc.stderr.count("\n") == 1, (args, proc.stderr)
        assert "trace/tape/00000000-" in proc.stderr and "control characters" in proc.stderr, args
    assert run_pf("show", "clean", cwd=root).returncode == 0


# -- 4. secrets in tool calls --------------------------------------------------------------------------

KEY = "sk-" + "Qw7Er9Ty" * 6
PASSWORD = "hunter2-horse-battery"
TOKEN = "tok-" + "Zz9" * 10
TOOLS = ("import json, os, sys, urllib.request\n"
         "import git_pf\n"
         f"KEY, PASSWORD, TOKEN = {KEY!r}, {PASSWORD!r}, {TOKEN!r}\n"
         "def ran(name):\n"
         "    open(sys.argv[1], 'a').write(name + '\\n')\n"
         "@git_pf.tool(side_effect='irreversible')\n"
         "def call_api(url, api_key, password):\n"
         "    ran('call_api')\n"
         "    return {'used': api_key, 'echo': 'logged in with ' + password}\n"
         "@git_pf.tool(side_effect='irreversible', key=lambda a: 'deploy-' + a['token'])\n"
         "def deploy(token):\n"
         "    ran('deploy')\n"
         "    return 'deployed'\n"
         "@git_pf.tool(side_effect='idempotent')\n"
         "def login(password):\n"
         "    ran('login')\n"
         "    raise PermissionError('wrong password ' + password + ' for key ' + KEY)\n"
         "out = [call_api('https://api.example', KEY, PASSWORD), deploy(TOKEN)]\n"
         "try:\n"
         "    login(PASSWORD)\n"
         "except Exception as e:\n"
         "    out.append(type(e).__name__)\n"
         "if os.environ.get('GIT_PF_MODE') == 'record':  # what another writer of the channel could send\n"
         "    raw = {'tool': 'raw', 'args': {'api_key': KEY}, 'result': None, 'side_effect_class': 'pure',\n"
         "           'idempotency_key': 'raw:1', 'ts': '2026-01-01T00:00:00Z'}\n"
         "    open(os.environ['GIT_PF_CHANNEL'], 'a').write(json.dumps({'t': 'effect', 'entry': raw}) + '\\n')\n"
         "body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'go'}]})\n"
         "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=body.encode(),\n"
         "                             method='POST', headers={'content-type': 'application/json'})\n"
         "urllib.request.urlopen(req).read()\n"
         "print(json.dumps(out))\n")


def test_a_secret_given_to_a_tool_reaches_no_git_object_and_the_call_still_replays(repo, run_pf, tmp_path):
    root, ran = repo.git_dir.parent, tmp_path / "ran.log"
    (tmp_path / "sb").mkdir()
    child = [sys.executable, "-c", TOOLS, ran]
    with FakeLLM(["ok"]) as fake:
        rec = run_pf("record", "--name", "t", "--fs-root", tmp_path / "sb", "--upstream", fake.url, "--", *child,
                     cwd=root)
    assert json.loads(rec.stdout)[2] == "PermissionError"
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=root,
                             capture_output=True, check=True).stdout
    for secret in (KEY, PASSWORD, TOKEN):
        assert secret.encode() not in objects, secret
    ledger = [json.loads(l) for l in subprocess.run(["git", "show", "refs/pf/heads/t:effects/ledger.jsonl"],
                                                    cwd=root, capture_output=True, text=True).stdout.splitlines()]
    assert [e["tool"] for e in ledger] == ["call_api", "deploy", "login", "raw"]
    assert ledger[0]["result"] == {"used": "<redacted>", "echo": "logged in with <redacted>"}
    assert ledger[1]["idempotency_key"] == "deploy-<redacted>" and ledger[3]["args"] == {"api_key": "<redacted>"}
    assert ledger[2]["error"] == "PermissionError: wrong password <redacted> for key <redacted>"
    assert ran.read_text().split() == ["call_api", "deploy", "login"]
    played = run_pf("replay", "t", "--json", "--", *child, cwd=root)
    out = _report(played.stdout)
    assert out["mismatch"] is None and out["divergence"] is None and out["exchanges"] == {"served": 1, "of": 1}
    assert out["effects"] == {"replayed": 3, "of": 4}  # raw was no call of git_pf.tool: nothing asks for it again
    assert ran.read_text().split() == ["call_api", "deploy", "login"]  # answered from the ledger, not run again


# -- 5. draws before a request the upstream never answered -------------------------------------------------

# Draws a tag, asks with it until an answer comes (on a 502: waits for the test to start the upstream), then
# draws once more: recorded, the first request fails; replayed, the tape answers it at once.
RETRY = ("import json, os, sys, time, urllib.error, urllib.request, uuid\n"
         "tag = uuid.uuid4().hex\n"
         "body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'hi ' + tag}]}).encode()\n"
         "while True:\n"
         "    req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=body,\n"
         "                                 method='POST', headers={'content-type': 'application/json'})\n"
         "    try:\n"
         "        reply = json.loads(urllib.request.urlopen(req).read())['choices'][0]['message']['content']\n"
         "        break\n"
         "    except urllib.error.HTTPError as e:\n"
         "        assert e.code == 502, e.code\n"
         "        open(sys.argv[1], 'w').close()\n"
         "        while not os.path.exists(sys.argv[2]):\n"
         "            time.sleep(0.02)\n"
         "print(json.dumps({'tag': tag, 'reply': reply, 'after': uuid.uuid4().hex}))\n")


def test_draws_before_a_request_the_upstream_never_answered_are_kept(repo, run_pf, tmp_path):
    import socket

    root, down, up = repo.git_dir.parent, tmp_path / "down", tmp_path / "up"
    closed = socket.socket()  # bound, not listening: the first connection is refused
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}")
    proc = subprocess.Popen(["git-pf", "record", "--name", "flaky", "--upstream", f"http://127.0.0.1:{port}", "--",
                             sys.executable, "-c", RETRY, down, up], cwd=root, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not down.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert down.exists(), proc.communicate()
        closed.close()
        with FakeLLM(["you again"], port=port):
            up.touch()
            out, err = proc.communicate(timeout=30)
    finally:
        closed.close()
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    recorded = json.loads(out)
    assert recorded["reply"] == "you again"
    played = run_pf("replay", "flaky", "--json", "--", sys.executable, "-c", RETRY, down, up, cwd=root)
    report = _report(played.stdout)
    assert report["bit_exact"] is True and report["draws"]["consumed"] == report["draws"]["of"] >= 2, report
    assert json.loads(played.stdout[:played.stdout.index("\n{")]) == recorded  # the same tag, reply and last draw
