"""A recording and the repository's upkeep: git's auto gc running during a long recording, a
storage failure while steps are written, and the recorder killed in the middle of a step write."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

from conftest import git_fsck_clean
from git_pf.testing.fakellm import FakeLLM
from git_pf.store.packfile import FAILPOINT_ENV, STOP_ENV
from runs_helpers import agent_cmd, agent_line, git, record, report, step_ids, tape


def _git_logging_gc(tmp_path) -> dict:
    """PATH with a ``git`` that notes every ``gc`` it is asked for, then runs the real one."""
    real = subprocess.run(["sh", "-c", "command -v git"], capture_output=True, text=True, check=True).stdout.strip()
    bindir = tmp_path / "bin"
    bindir.mkdir()
    log = tmp_path / "gc-started"
    (bindir / "git").write_text(f'#!/bin/sh\ncase " $* " in *" gc "*) echo gc >> "{log}";; esac\nexec {real} "$@"\n')
    (bindir / "git").chmod(0o755)
    return {"PATH": f"{bindir}:{os.path.dirname(sys.executable)}:{os.environ['PATH']}", "_log": str(log)}


def test_a_long_recording_with_auto_gc_running_completes_and_replays_bit_exact(repo, tmp_path, run_pf):
    repo_dir = repo.git_dir.parent
    git(repo_dir, "config", "gc.autoPackLimit", "2")  # git-pf starts git's auto gc at nearly every step
    env = _git_logging_gc(tmp_path)
    log = env.pop("_log")
    with FakeLLM() as fake:
        proc = record(run_pf, repo_dir, fake, "openai.chat", tmp_path / "sandbox", "--steps", "300", env=env)
    rep = report(proc.stdout)
    assert rep["steps"] == 300 and rep["exit"] == 0 and rep["failures"] == [] and rep["steps_lost"] == 0
    assert os.path.exists(log)  # the auto gc really was started while the run wrote its steps
    assert sorted(step_ids(repo_dir, "run")) == list(range(301))
    replayed = run_pf("replay", "run", "--json", "--", *agent_cmd("openai.chat", tmp_path / "sb2", "--steps", "300"),
                      cwd=repo_dir)
    assert report(replayed.stdout)["bit_exact"] is True
    git_fsck_clean(repo_dir)


def test_a_step_that_cannot_be_written_leaves_the_agent_run_and_is_reported(repo, tmp_path, run_pf):
    repo_dir = repo.git_dir.parent
    # pack write 1: step 0; from the 2nd on every write fails (a full disk)
    env = {FAILPOINT_ENV: "2"}
    with FakeLLM() as fake:
        proc = record(run_pf, repo_dir, fake, "openai.chat", tmp_path / "sandbox", "--steps", "4", env=env, check=False)
    assert agent_line(proc.stdout)["steps"] == 4  # the agent's run went through
    assert proc.returncode == 1  # docs/cli.md: could not finish writing
    rep = report(proc.stdout)
    assert rep["exit"] == 0 and rep["steps"] == 4 and rep["steps_lost"] == 5  # steps 1-4 and the end image
    assert any("No space left on device" in f for f in rep["failures"])
    err = [l for l in proc.stderr.splitlines() if l.startswith("git pf:")]
    assert len(err) == 2 and "step images lost" in err[-1]  # the first failure as it came, then the summary
    assert sorted(step_ids(repo_dir, "run")) == [0]  # the branch is at the last image written whole
    assert "Pf-Run-Exit" not in git(repo_dir, "log", "-1", "--format=%B", "refs/pf/heads/run")
    git_fsck_clean(repo_dir)


def test_a_recorder_killed_in_the_middle_of_a_step_write_leaves_the_steps_before_it(repo, tmp_path, run_pf):
    repo_dir = repo.git_dir.parent
    fifo = tmp_path / "stop"
    os.mkfifo(fifo)
    with FakeLLM() as fake:
        cmd = ["git-pf", "record", "--name", "run", "--fs-root", str(tmp_path / "sandbox"), "--upstream", fake.url,
               "--", *agent_cmd("openai.chat", tmp_path / "sandbox", "--steps", "6")]
        (tmp_path / "sandbox").mkdir()
        env = dict(os.environ, PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
                   **{STOP_ENV: f"4:{fifo}"})  # the 4th pack write (a step's or a merge's): its pack in place, no index
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # open before the victim starts: it stops only then
        ours = os.open(fifo, os.O_WRONLY)  # keeps the read below waiting for the victim's line, not EOF
        os.set_blocking(reader, True)
        victim = subprocess.Popen(cmd, cwd=repo_dir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        pid = int(os.read(reader, 64))
        os.close(reader)
        os.close(ours)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait()
        assert pid == victim.pid
        steps = sorted(step_ids(repo_dir, "run"))
        assert len(steps) >= 2 and steps == list(range(len(steps)))  # every step before the kill, in order
        git_fsck_clean(repo_dir)
        run_pf("fsck", cwd=repo_dir)
        again = record(run_pf, repo_dir, fake, "openai.chat", tmp_path / "sandbox2", "--steps", "3", name="again")
    assert report(again.stdout)["steps"] == 3
    git_fsck_clean(repo_dir)


def test_a_step_lost_for_a_while_is_counted_on_the_end_image(repo, tmp_path, run_pf):
    repo_dir = repo.git_dir.parent
    env = {FAILPOINT_ENV: "2-4"}  # step 1's write and its two retries fail; the disk has room again after
    with FakeLLM() as fake:
        proc = record(run_pf, repo_dir, fake, "openai.chat", tmp_path / "sandbox", "--steps", "3", env=env, check=False)
    rep = report(proc.stdout)
    assert proc.returncode == 1 and rep["steps_lost"] == 1 and rep["exit"] == 0
    assert sorted(step_ids(repo_dir, "run")) == [0, 2, 3]
    assert "Pf-Steps-Lost: 1" in git(repo_dir, "log", "-1", "--format=%B", "refs/pf/heads/run")
    assert [e["step"] for e in tape(repo_dir, "refs/pf/heads/run")][:3] == [1, 2, 3]  # exchange 1 is on the tape
