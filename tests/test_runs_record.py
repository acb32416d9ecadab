"""``git pf record``: a live agent on the real SDKs, behind the proxy, recorded as step images.

Real components only: the fake LLM servers of git_pf/testing/fakellm.py on 127.0.0.1, the agent of
git_pf/testing/demo_agent.py on the real openai / anthropic SDKs, the real ``git-pf`` command."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from git_pf.testing.fakellm import COOKIE, FakeLLM
from runs_helpers import SCRIPT, agent_line, git, record, report, step_ids, tape

SECRET = "ghp_" + "Zq8" * 12  # a GitHub token the agent puts in its system prompt
OPENAI_KEY = "sk-proj-" + "Rk3vT9" * 8
ANTHROPIC_KEY = "sk-ant-api03-" + "Hm2wQ7" * 8


def test_each_exchange_is_a_step_with_its_world_and_the_agent_sees_no_difference(repo, run_pf, tmp_path):
    with FakeLLM(SCRIPT) as fake:
        direct = subprocess.run([sys.executable, "-m", "git_pf.testing.demo_agent", "--api", "openai.chat",
                                 "--sandbox", str(tmp_path / "direct"), "--effects-file", str(tmp_path / "fx0")],
                                env=dict(os.environ, **fake.env()), capture_output=True, text=True)
    with FakeLLM(SCRIPT) as fake:
        proc = record(run_pf, repo.git_dir.parent, fake, "openai.chat", tmp_path / "sb", effects=tmp_path / "fx")
        assert len(fake.requests) == 5
    out = report(proc.stdout)
    assert out["steps"] == 5 and out["exit"] == 0 and out["branch"] == "run"
    # what the agent got through the proxy is what it got from the server directly (replies, tools, files)
    mine, theirs = agent_line(proc.stdout), agent_line(direct.stdout)
    assert mine["last"] == theirs["last"] == "All done." and mine["tools"] == theirs["tools"]
    steps = step_ids(repo.git_dir.parent, "run")
    assert sorted(steps) == [0, 1, 2, 3, 4, 5]
    # step 3's world is the sandbox when request 3 was sent: notes of steps 1 and 3's log line, no out.txt
    run_pf("checkout", steps[3], "--into", tmp_path / "w3", cwd=repo.git_dir.parent)
    assert (tmp_path / "w3" / "notes" / "step-01.txt").read_text() == "I will keep notes."
    assert len((tmp_path / "w3" / "log.txt").read_text().splitlines()) == 3
    assert not (tmp_path / "w3" / "out.txt").exists()
    tape = json.loads(run_pf("show", "run", "--step", "5", "--json", cwd=repo.git_dir.parent).stdout)
    assert tape["step"] == 5
    log = run_pf("log", "run", cwd=repo.git_dir.parent).stdout
    assert re.search(r"step:?\s+5\b", log, re.I) and re.search(r"step:?\s+0\b", log, re.I)


@pytest.mark.parametrize("api,extra", [("openai.responses", ("--stream",)), ("anthropic", ("--stream", "--async"))])
def test_streamed_responses_keep_their_chunks(repo, run_pf, tmp_path, api, extra):
    with FakeLLM(SCRIPT, chunk_delay_ms=5) as fake:
        proc = record(run_pf, repo.git_dir.parent, fake, api, tmp_path / "sb", *extra, "--steps", "3", effects=tmp_path / "fx")
    assert agent_line(proc.stdout)["exchanges"] == 3
    tip = report(proc.stdout)["tip"]
    entry = tape(repo.git_dir.parent, tip)[0]
    assert entry["v"] == 2 and entry["response"]["body"] is None
    chunks = entry["response"]["chunks"]
    assert len(chunks) > 2 and all(c["ms"] >= 0 for c in chunks)
    assert max(c["ms"] for c in chunks[1:]) >= 3  # the fake's delays between events were measured


def test_no_secret_from_headers_or_bodies_reaches_any_object(repo, run_pf, tmp_path):
    with FakeLLM(SCRIPT) as fake:
        for api, key in (("openai.chat", OPENAI_KEY), ("anthropic", ANTHROPIC_KEY)):
            record(run_pf, repo.git_dir.parent, fake, api, tmp_path / f"sb-{api}", "--steps", "3", "--secret", SECRET,
                   name=f"run-{api}", effects=tmp_path / "fx",
                   env={"OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key})
        sent = b"".join(r["body"] for r in fake.requests) + json.dumps([r["headers"] for r in fake.requests]).encode()
        assert SECRET.encode() in sent and OPENAI_KEY.encode() in sent and ANTHROPIC_KEY.encode() in sent
    objects = subprocess.run(["git", "cat-file", "--batch-all-objects", "--batch"], cwd=repo.git_dir.parent,
                             capture_output=True, check=True).stdout
    side = b"".join(p.read_bytes() for p in (repo.git_dir / "pf" / "objects").rglob("*") if p.is_file()) \
        if (repo.git_dir / "pf" / "objects").is_dir() else b""
    assert b"Pf-Step: 3" in objects  # the scan reads the run's objects
    for secret in (SECRET, OPENAI_KEY, ANTHROPIC_KEY, COOKIE.split("=", 1)[1]):
        assert secret.encode() not in objects and secret.encode() not in side, secret


def test_upstream_down_gives_the_agent_502_and_one_line(repo, run_pf, tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    child = ("import os, urllib.request, urllib.error\n"
             "req = urllib.request.Request(os.environ['OPENAI_BASE_URL'] + '/chat/completions', data=b'{}', method='POST')\n"
             "try:\n    urllib.request.urlopen(req)\nexcept urllib.error.HTTPError as e:\n    print('status', e.code)\n")
    proc = run_pf("record", "--upstream", dead, "--", sys.executable, "-c", child, cwd=repo.git_dir.parent, check=False)
    assert proc.returncode == 1
    assert "status 502" in proc.stdout
    assert proc.stderr == f"git pf: error: upstream {dead} is unreachable: Connection refused\n"


def test_bad_input_is_one_line_and_writes_nothing(repo, run_pf, tmp_path):
    proc = run_pf("record", "--", "no-such-agent-command", "--x", cwd=repo.git_dir.parent, check=False)
    assert (proc.returncode, proc.stderr) == (127, "git pf: error: no-such-agent-command: command not found\n")
    proc = run_pf("record", "--upstream", "ftp://x", "--", "true", cwd=repo.git_dir.parent, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "ftp://x" in proc.stderr
    proc = run_pf("record", "--fs-root", tmp_path / "absent", "--", "true", cwd=repo.git_dir.parent, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--fs-root" in proc.stderr
    assert git(repo.git_dir.parent, "for-each-ref", "refs/pf/heads/") == ""
    run_pf("record", "--name", "r", "--", "true", cwd=repo.git_dir.parent)
    proc = run_pf("record", "--name", "r", "--", "true", cwd=repo.git_dir.parent, check=False)
    assert proc.returncode == 2 and "'r'" in proc.stderr and proc.stderr.count("\n") == 1


POST_BOTH = ("import json, os, urllib.request\n"
             "for url, body in ((os.environ['OPENAI_BASE_URL'] + '/chat/completions', {'model': 'm', 'messages': []}),\n"
             "                  (os.environ['ANTHROPIC_BASE_URL'] + '/v1/messages', {'model': 'c', 'max_tokens': 5, 'messages': []})):\n"
             "    req = urllib.request.Request(url, data=json.dumps(body).encode(), method='POST',\n"
             "                                 headers={'content-type': 'application/json'})\n"
             "    print(json.load(urllib.request.urlopen(req))['model'])\n")


def test_each_api_goes_to_its_upstream_from_flags_or_git_config(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(["from a"], model="model-a") as a, FakeLLM(["from b"], model="model-b") as b:
        proc = run_pf("record", "--name", "flags", "--upstream", f"openai={a.url}/v1", "--upstream",
                      f"anthropic={b.url}", "--", sys.executable, "-c", POST_BOTH, cwd=root)
        assert proc.stdout.split() == ["model-a", "model-b"]
        assert [r["path"] for r in a.requests] == ["/v1/chat/completions"]  # the upstream's /v1 not doubled
        assert [r["path"] for r in b.requests] == ["/v1/messages"]
        git(root, "config", "pf.upstream.openai", b.url)
        git(root, "config", "pf.upstream.anthropic", a.url)
        proc = run_pf("record", "--name", "config", "--", sys.executable, "-c", POST_BOTH, cwd=root)
        assert proc.stdout.split() == ["model-b", "model-a"]
    assert sorted(step_ids(root, "config")) == [0, 1, 2]
