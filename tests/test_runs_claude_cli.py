"""The real Claude Code CLI recorded through the proxy replays with no flags: its requests go to the
Anthropic route (its HEAD preconnects answered locally), and the claude-code profile, picked from its
User-Agent, masks what changes from one session to the next (docs/record.md, "Profiles and masks").

Real components: the CLI that ``make claude-code`` installs, the scripted Anthropic server of
tests/claude_cli_helpers.py, the real ``git-pf`` command. Skipped, saying why, without the CLI."""
from __future__ import annotations

import os

import pytest

from claude_cli_helpers import CLAUDE, ScriptedAnthropic, claude_env, missing, session
from runs_helpers import report, tape


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
