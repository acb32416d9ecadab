"""The Claude Code hook server opens an event's ``transcript_path`` only when it is a regular file
of bounded size (docs/security.md, "Hook server transcripts"): a FIFO there (which blocked the
server, and every later hook with it) or an oversized file is skipped with one line in
``hook.log``, and the step's image is written all the same, by the real ``git pf hook
claude-code`` with the hook server on."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from git_pf import Repo
from git_pf.integrations.claude_code.session import MAX_TRANSCRIPT
from git_pf.integrations.claude_code.hook import sync

from test_integrations_claude_code import SID, claude, project  # noqa: F401  (fixtures)

HANG_GUARD_S = 300  # only so a regression fails instead of hanging the suite


def _hook(claude, event: str, transcript, **more) -> subprocess.CompletedProcess:
    payload = {**claude.payload(event, **more), "transcript_path": str(transcript)}
    return subprocess.run(["sh", "-c", "git pf hook claude-code"], input=json.dumps(payload).encode(),
                          cwd=claude.project, env=claude.env, capture_output=True, timeout=HANG_GUARD_S)


@pytest.mark.parametrize("kind", ["fifo", "oversized"])
def test_a_bad_transcript_is_skipped_with_one_log_line_and_the_step_is_written(claude, tmp_path, kind):
    subprocess.run(["git", "config", "pf.claudeCode.server", "true"], cwd=claude.project, check=True)
    bad = tmp_path / f"transcript.{kind}"
    if kind == "fifo":
        os.mkfifo(bad)
    else:
        with open(bad, "wb") as f:
            f.truncate(MAX_TRANSCRIPT + 1)  # sparse: no disk
    log = claude.project / ".git/pf/claude-code/hook.log"

    start = _hook(claude, "SessionStart", bad, source="startup")
    assert start.returncode == 0 and start.stderr == b"", start.stderr
    (claude.project / "made.txt").write_text("made\n")
    step = _hook(claude, "PostToolUse", bad, tool_name="Bash", tool_input={"command": "echo made > made.txt"},
                 tool_response={"stdout": "", "stderr": ""}, tool_use_id="toolu_bad")
    assert step.returncode == 0 and step.stderr == b"", step.stderr
    assert (claude.project / ".git/pf/claude-code/server.pid").exists()  # the server handled them
    sync(str(claude.project / ".git"))  # it answers a step once its world is captured, and writes after

    lines = log.read_text().splitlines()
    assert len(lines) == 2 and all("transcript skipped" in l and str(bad) in l for l in lines), lines
    assert ("not a regular file" if kind == "fifo" else "over") in lines[0]
    repo = Repo.open(claude.project)
    images = repo.log(f"cc/{SID}")
    assert [i.trailer("Pf-Step") for i in images] == [["1"], ["0"]]
    assert repo.read_layer(f"cc/{SID}", "world/fs/made.txt") == b"made\n"
    [entry] = [json.loads(l) for l in repo.read_layer(f"cc/{SID}", "effects/ledger.jsonl").splitlines()]
    assert entry["idempotency_key"] == "toolu_bad"

    # the same server goes on reading a good transcript
    claude.line(type="user", message={"role": "user", "content": "go on"})
    claude.tool("Read", {"file_path": str(claude.project / "made.txt")}, {"type": "text"})
    sync(str(claude.project / ".git"))
    messages = [json.loads(l) for l in repo.read_layer(f"cc/{SID}", "trace/messages.jsonl").splitlines()]
    assert messages[0] == {"role": "user", "content": "go on"} and len(log.read_text().splitlines()) == 2
