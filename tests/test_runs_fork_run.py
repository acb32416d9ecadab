"""``git pf fork --at-step`` + ``git pf run``: change what the model said at step 3 of 5 and go on live
from there, in step 3's world. Real components: fake LLM servers, the agent on the real SDKs, the CLI."""
from __future__ import annotations

from git_pf.testing.fakellm import FakeLLM
from runs_helpers import SCRIPT, agent_cmd, agent_line, git, record, report, step_ids


def test_fork_at_step_3_of_5_runs_on_live_from_the_original_prefix(repo, run_pf, tmp_path):
    root, fx = repo.git_dir.parent, tmp_path / "effects.log"
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb", "--stream", effects=fx)
    original = step_ids(root, "run")
    (tmp_path / "reply.txt").write_text("Changed my mind: writing plan.txt.")
    run_pf("fork", "run", "--at-step", "3", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    forked = step_ids(root, "alt")
    assert [forked[n] for n in (0, 1, 2)] == [original[n] for n in (0, 1, 2)]  # the same commits
    assert forked[3] != original[3]
    assert git(root, "rev-parse", f"{forked[3]}^").strip() == original[2]
    notified = fx.read_text()
    with FakeLLM(["live four", "live five"]) as live:
        proc = run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--json", "--",
                      *agent_cmd("openai.chat", tmp_path / "w", "--stream", effects=fx), cwd=root)
        assert len(live.requests) == 2  # steps 1-3 came from the tape, 4 and 5 from the live server
    out = report(proc.stdout)
    assert out["exit"] == 0 and out["steps"] == 2 and out["branch"] == "alt"
    summary = agent_line(proc.stdout)
    assert summary["last"] == "live five" and summary["exchanges"] == 5
    assert (tmp_path / "w" / "notes" / "step-03.txt").read_text() == "Changed my mind: writing plan.txt."
    assert fx.read_text() == notified  # the prefix's notify came from the ledger
    now = step_ids(root, "alt")
    assert sorted(now) == [0, 1, 2, 3, 4, 5] and now[3] == forked[3] and now[4] != original[4]
    assert step_ids(root, "run") == original  # the original run is untouched


def test_bad_fork_and_run_input_is_one_line(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb", "--steps", "2", effects=tmp_path / "fx")
        (tmp_path / "r.txt").write_text("x")
        for args, code, words in (
                (("fork", "run", "--at-step", "7", "--response", tmp_path / "r.txt"), 2, "7"),
                (("run", "nope", "--", "true"), 2, "nope"),
                (("run", "run", "--upstream", fake.url, "--", "no-such-agent-command"), 127, "command not found")):
            proc = run_pf(*args, cwd=root, check=False)
            assert proc.returncode == code, (args, proc.stderr)
            assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr


def test_a_run_step_that_cannot_be_written_is_reported_as_record_reports_it(repo, run_pf, tmp_path):
    from git_pf.store.packfile import FAILPOINT_ENV

    root = repo.git_dir.parent
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb")
    (tmp_path / "reply.txt").write_text("Changed my mind: writing plan.txt.")
    run_pf("fork", "run", "--at-step", "3", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    with FakeLLM(["live four", "live five"]) as live:
        proc = run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--json", "--",
                      *agent_cmd("openai.chat", tmp_path / "w"), cwd=root, check=False,
                      env={FAILPOINT_ENV: "1-3"})  # the first step write and its two retries fail (a full disk)
    assert agent_line(proc.stdout)["exchanges"] == 5  # the agent's run went through
    assert proc.returncode == 1  # docs/cli.md: could not finish writing
    out = report(proc.stdout)
    assert out["exit"] == 0 and out["steps"] == 2 and out["steps_lost"] == 1
    assert any("No space left on device" in f for f in out["failures"])
    assert "step images lost" in proc.stderr
    assert "Pf-Steps-Lost: 1" in git(root, "log", "-1", "--format=%B", "refs/pf/heads/alt")


def test_forks_at_a_step_run_one_after_another_each_start_in_a_fresh_step_0_world(repo, run_pf, tmp_path):
    """``fanout --at-step`` with one job: the forks reuse one world directory, each agent leaving
    it written, deleted, chmodded, with ignored files, a fifo and xattrs; each next one still starts
    in exactly what a fresh checkout of the run's step 0 gives."""
    import json
    import os
    import sys
    from pathlib import Path

    import blame_helpers
    from blame_helpers import HERE, REPLIES, by_step, messy_world, seen_world
    from git_pf.runs.replaying import fresh_world
    from git_pf.runs.steps import at_step

    root = repo.git_dir.parent
    messy_world(root.parent / "run-world")
    seen = tmp_path / "seen"
    seen.mkdir()
    env = {"SEEN": str(seen), "PYTHONPATH": os.pathsep.join([str(Path(HERE).parent), os.environ.get("PYTHONPATH", "")])}
    with FakeLLM(by_step(REPLIES)) as fake:
        blame_helpers.record(run_pf, root, fake)
        out = json.loads(run_pf("fanout", "run", "--at-step", "3", "-n", "3", "--jobs", "1", "--perturb",
                                "blame_helpers:fix", "--upstream", fake.url, "--json", "--", sys.executable,
                                str(HERE), "messy", cwd=root, env=env).stdout)
    assert [r["exit"] for r in out["forks"]] == [0, 0, 0]
    want = seen_world(fresh_world(repo, at_step(repo.git, "run", 0), tmp_path / "fresh"))
    starts = sorted(seen.iterdir())
    assert len(starts) == 3 and [p.read_text() for p in starts] == [want] * 3
