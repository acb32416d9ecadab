"""The command server's spare child and its ``-h`` (docs/server.md, "What runs where"): commands
taken by a spare forked ahead of them give what they give in-process, one after another, with
nothing of one reaching the next; ``git pf -h`` answered from the text made at start-up is the
in-process help byte for byte (a closed pipe and other widths too); a change of git-pf's files
never lets the old help be served."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import BIN
from test_cli_server import _env, copied_install, pf, processes_of, running_server, status, wait_for, world  # noqa: F401

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the command server needs Linux")


def _outcome(proc) -> tuple:
    return proc.returncode, proc.stdout, proc.stderr


def test_commands_after_one_another_each_start_clean(world):
    """Each command a spare takes starts from the server's state, never from the one before it:
    working directory, environment, an error, top-level help answered by the spare itself."""
    repo, sb, ids = world
    (repo / "sub").mkdir()
    (repo / "elsewhere").mkdir()  # found from the repository's top, not from sub
    running_server(repo)
    served = status(repo)["served"]
    steps = [  # (arguments, working directory, extra environment)
        (("-h",), repo, {}),
        (("show", "no-such-rev"), repo, {}),
        (("log", "-n", "2"), repo / "sub", {}),
        (("-h",), repo, {"COLUMNS": "60"}),
        (("snapshot", "--fs-root", "elsewhere", "-q"), repo / "sub", {}),
        (("diff", ids[0], ids[2], "--stat"), repo, {"COLUMNS": "200"}),
        (("log", "-n", "1", "--oneline"), repo, {}),
    ]
    got = [pf(*args, cwd=cwd, env=_env(**extra), check=False) for args, cwd, extra in steps]
    after = status(repo)["served"]
    want = [pf(*args, cwd=cwd, env=_env(GIT_PF_SERVER="0", **extra), check=False) for args, cwd, extra in steps]
    for (args, _, extra), have, expected in zip(steps, got, want):
        assert _outcome(have) == _outcome(expected), (args, extra)
    assert {p.returncode for p in got} != {0}  # the failing one failed, the rest did not
    assert after - served == len(steps)  # every one of them was served
    # between commands, the server has one child ready for the next (the spare)
    wait_for(lambda: len(processes_of((repo / ".git").resolve())) == 2, "the spare to wait")


def test_served_help_is_the_in_process_help(world):
    repo, _, _ = world
    running_server(repo)
    for extra in ({}, {"COLUMNS": "55"}, {"COLUMNS": "junk"}):
        served = status(repo)["served"]
        have = pf("-h", cwd=repo, env=_env(**extra))
        want = pf("-h", cwd=repo, env=_env(GIT_PF_SERVER="0", **extra))
        assert _outcome(have) == _outcome(want) and have.stdout.startswith("Usage: git pf"), extra
        assert status(repo)["served"] == served + 1, extra


def test_served_help_to_a_closed_pipe_ends_as_in_process(world):
    """``git pf -h`` whose reader has gone: the exit status and (no) message of the command."""
    repo, _, _ = world
    running_server(repo)

    def closed(env) -> tuple:
        r, w = os.pipe()
        os.close(r)
        try:
            proc = subprocess.run([str(BIN / "git-pf"), "-h"], cwd=repo, env=env, stdout=w, stderr=subprocess.PIPE,
                                  stdin=subprocess.DEVNULL, timeout=120)
        finally:
            os.close(w)
        return proc.returncode, proc.stderr

    served = status(repo)["served"]
    assert closed(_env()) == closed(_env(GIT_PF_SERVER="0"))
    assert status(repo)["served"] == served + 1


def test_a_change_of_git_pf_files_never_serves_the_old_help(world, tmp_path):
    repo, _, _ = world
    site, env, first = copied_install(repo, tmp_path)
    old = pf("-h", cwd=repo, env=env).stdout
    assert status(repo, env)["served"] == first["served"] + 1 and "fork() for AI agents" in old
    app = site / "git_pf" / "cli" / "app.py"  # what a reinstall of a new version does to a file
    app.write_text(app.read_text().replace("fork() for AI agents", "fork() for agents, anew"))
    new = pf("-h", cwd=repo, env=env).stdout
    assert "fork() for agents, anew" in new and "fork() for AI agents" not in new
    wait_for(lambda: not status(repo, env)["running"] or status(repo, env)["pid"] != first["pid"],
             "the stale server to stop")
    second = running_server(repo, env)  # a new server, with the new text
    assert second["pid"] != first["pid"]
    again = pf("-h", cwd=repo, env=env)
    assert again.stdout == new and status(repo, env)["served"] == second["served"] + 1


def test_an_idle_server_ends_with_its_spare(world):
    """``pf.server.idleTimeout``: the server and the spare that waits for the next command both end."""
    repo, _, ids = world
    pf("server", "stop", cwd=repo)
    subprocess.run(["git", "config", "pf.server.idleTimeout", "1s"], cwd=repo, check=True)
    git_dir = (repo / ".git").resolve()
    running_server(repo)
    assert ids[2] in pf("show", cwd=repo).stdout
    wait_for(lambda: len(processes_of(git_dir)) == 2, "the spare to wait")
    wait_for(lambda: not processes_of(git_dir), "the idle server and its spare to end")
    assert not status(repo)["running"]
