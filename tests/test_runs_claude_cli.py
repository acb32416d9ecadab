"""The real Claude Code CLI recorded through the proxy replays with no flags: its requests go to the
Anthropic route (its HEAD preconnects answered locally), and the claude-code profile, picked from its
User-Agent, masks what changes from one session to the next (docs/record.md, "Profiles and masks").

Real components: the CLI that ``make claude-code`` installs, the scripted Anthropic server of
tests/claude_cli_helpers.py, the real ``git-pf`` command. Skipped, saying why, without the CLI."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from claude_cli_helpers import CLAUDE, ScriptedAnthropic, claude_env, missing, session
from runs_helpers import git, report, step_ids, tape


@pytest.fixture
def cli():
    why = missing()
    if why:
        pytest.skip(why)


def _claude(run_pf, root, proj, cfg, fake, *args):
    cmd = ["sh", "-c", f"cd '{proj}' && exec '{CLAUDE}' -p 'do the task' --dangerously-skip-permissions "
                       "--output-format json"]
    return run_pf(*args, "--", *cmd, cwd=root, env=claude_env({}, fake.url, cfg), check=False)


def test_a_claude_code_session_replays_bit_exact_with_no_flags(cli, repo, run_pf, tmp_path):
    root, proj, cfg = repo.git_dir.parent, tmp_path / "proj", tmp_path / "cfg"
    proj.mkdir()
    cfg.mkdir()
    (tmp_path / "empty.toml").write_text('name = "none"\n')
    with ScriptedAnthropic(session(proj)) as fake:
        rec = _claude(run_pf, root, proj, cfg, fake, "record", "--name", "cc", "--fs-root", proj, "--upstream",
                      f"anthropic={fake.url}", "--json")
        assert rec.returncode == 0 and report(rec.stdout)["steps"] == 4, rec.stderr[-2000:]
        assert fake.unknown() == [] and fake.others == []  # no preconnect reached the server
        # the same session without the profile (an empty one given instead)
        rec = _claude(run_pf, root, proj, cfg, fake, "record", "--name", "bare", "--fs-root", proj, "--upstream",
                      f"anthropic={fake.url}", "--profile", tmp_path / "empty.toml", "--json")
        assert rec.returncode == 0, rec.stderr[-2000:]
        served = len(fake.requests)
        entries = [e for e in tape(root, "refs/pf/heads/cc") if e.get("kind") == "exchange"]
        assert {e["match"]["profile"] for e in entries} == {"claude-code"}
        assert {e["request"]["family"] for e in entries} == {"anthropic"}
        before = {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()}
        # a new session: another session id in every request, and nothing to pass on the command line
        played = _claude(run_pf, root, proj, cfg, fake, "replay", "cc", "--json")
        out = report(played.stdout)
        assert played.returncode == 0 and out["bit_exact"] is True, (out["mismatch"], played.stderr[-2000:])
        assert out["exchanges"] == {"served": 4, "of": 4}
        bare = _claude(run_pf, root, proj, cfg, fake, "replay", "bare", "--json")
        assert bare.returncode == 1 and report(bare.stdout)["mismatch"]["diff"][0]["path"] == "$.metadata.user_id"
        assert len(fake.requests) == served  # the replays asked the server nothing
    assert {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()} == before  # the replays wrote in their worlds


def test_a_claude_code_session_forked_at_step_2_runs_on_live_from_the_recordings_world(cli, repo, run_pf, tmp_path):
    root, proj, cfg = repo.git_dir.parent, tmp_path / "proj", tmp_path / "cfg"
    proj.mkdir()
    cfg.mkdir()
    with ScriptedAnthropic(session(proj)) as fake:
        rec = _claude(run_pf, root, proj, cfg, fake, "record", "--name", "cc", "--fs-root", proj, "--upstream",
                      f"anthropic={fake.url}", "--json")
        assert rec.returncode == 0 and report(rec.stdout)["steps"] == 4, rec.stderr[-2000:]
    recorded = step_ids(root, "cc")
    before = {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()}
    # step 2 answers with another Bash call than the recording's failing one
    reply = {"id": "msg_fork", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
             "content": [{"type": "tool_use", "id": "toolu_fork_1", "name": "Bash",
                          "input": {"command": "echo forked > forked.txt", "description": "make a file"}}],
             "stop_reason": "tool_use", "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1}}
    (tmp_path / "reply.json").write_text(json.dumps(reply))
    run_pf("fork", "cc", "--at-step", "2", "--response", tmp_path / "reply.json", "--name", "alt", cwd=root)
    with ScriptedAnthropic(session(proj)) as live:
        ran = _claude(run_pf, root, proj, cfg, live, "run", "alt", "--upstream", f"anthropic={live.url}",
                      "--fs-root", tmp_path / "w", "--json")
        assert ran.returncode == 0, ran.stderr[-2000:]
        assert [r for r in live.requests if r["api"] != "other"], "nothing after the fork's step went live"
    now = step_ids(root, "alt")
    assert now[1] == recorded[1]  # the prefix is the recording's own image
    # the agent rebuilt step 2's world itself, from step 0's: the same tree as the recording's
    assert git(root, "rev-parse", f"{now[2]}:world/fs") == git(root, "rev-parse", f"{recorded[2]}:world/fs")
    assert (tmp_path / "w" / "forked.txt").read_text() == "forked\n"  # the forked call ran, live, in the world
    assert max(now) > 2
    assert {p: p.read_bytes() for p in proj.rglob("*") if p.is_file()} == before  # the project was never written


def test_a_claude_code_session_in_a_git_repository_replays_bit_exact_and_leaves_the_repository(cli, repo, run_pf,
                                                                                                tmp_path):
    root, proj, cfg = repo.git_dir.parent, tmp_path / "proj", tmp_path / "cfg"
    proj.mkdir()
    cfg.mkdir()
    (proj / "README").write_text("a project\n")
    for args in (["init", "-q"], ["add", "README"], ["-c", "user.name=u", "-c", "user.email=u@e", "commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(proj), *args], check=True)
    with ScriptedAnthropic(session(proj)) as fake:
        rec = _claude(run_pf, root, proj, cfg, fake, "record", "--name", "cc", "--fs-root", proj, "--upstream",
                      f"anthropic={fake.url}", "--json")
        assert rec.returncode == 0 and report(rec.stdout)["steps"] == 4, rec.stderr[-2000:]
        # the CLI saw a repository: its system prompt says so and carries the git status block
        assert "Is a git repository: true" in json.dumps(tape(root, "refs/pf/heads/cc"))
        served = len(fake.requests)
        state = lambda: ({p: p.read_bytes() for p in proj.rglob("*") if p.is_file()},
                         subprocess.run(["git", "-C", str(proj), "status", "--porcelain"], capture_output=True).stdout)
        before = state()
        played = _claude(run_pf, root, proj, cfg, fake, "replay", "cc", "--json")
        out = report(played.stdout)
        assert played.returncode == 0 and out["bit_exact"] is True, (out["mismatch"], played.stderr[-2000:])
        assert len(fake.requests) == served
    assert state() == before  # the project and its .git are as they were
