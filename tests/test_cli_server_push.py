"""``git pf push`` and ``fetch`` through the command server (docs/server.md, "Push and fetch"):
served only for a client with no controlling terminal, with the output and exit codes of an
in-process run; a push whose client is killed or signalled ends with its git processes, leaves
the remote's refs as they were, and runs again."""
from __future__ import annotations

import os
import pty
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BIN
from test_cli_server import _env, alive, status, wait_for
from transport_helpers import bare, rand_bytes, sh

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the command server needs Linux")


def run(*args, cwd, env=None, **kw) -> subprocess.CompletedProcess:
    """``git-pf`` as a script or an agent runs it: its own session, so no controlling terminal."""
    kw.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run([str(BIN / "git-pf"), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=env or _env(), timeout=120, start_new_session=True, **kw)


def served(repo) -> tuple[int, int]:
    """The server's pid and how many commands it has served (one is started where none runs:
    a change of git-pf's files stops a server)."""
    def ready():
        state = status(repo)
        if not state["running"]:
            run("log", "-n", "1", cwd=repo)
        return state if state["running"] else None
    s = wait_for(ready, "a server")
    return s["pid"], s["served"]


def on_the_server(repo, command):
    """``command()``'s result, run while one server served it. git-pf's files changing (a reinstall,
    an edit) stops a server and the command then runs in-process: it is run again."""
    for _ in range(5):
        pid, before = served(repo)
        result = command()
        now = status(repo)
        if now["running"] and now["pid"] == pid:
            assert now["served"] > before
            return result
    raise AssertionError("no server stayed up for the command")


@pytest.fixture
def pushing(tmp_path):
    """A repository with one image and a bare ``origin``, its server running; stopped at the end."""
    sb, repo = tmp_path / "sb", tmp_path / "a"
    (sb / "sub").mkdir(parents=True)
    (sb / "big.bin").write_bytes(rand_bytes(256 * 1024, 1))
    (sb / "sub" / "note.txt").write_text("hello\n")
    assert run("init", repo, cwd=tmp_path).returncode == 0
    assert run("snapshot", "--fs-root", sb, "-q", "-m", "first", cwd=repo).returncode == 0
    remote = bare(tmp_path / "r.git")
    sh("git", "remote", "add", "origin", remote, cwd=repo)
    served(repo)
    yield repo, sb, remote
    run("server", "stop", cwd=repo)


def _remote_refs(remote: Path) -> str:
    return sh("git", "for-each-ref", cwd=remote).stdout


def test_push_and_fetch_are_served_with_the_output_and_exit_codes_of_in_process(pushing, tmp_path):
    repo, sb, remote = pushing
    off = _env(GIT_PF_SERVER="0")
    saved = tmp_path / "saved"
    for name in ("a", "r.git"):
        shutil.copytree(tmp_path / name, saved / name, symlinks=True)
    have = on_the_server(repo, lambda: run("push", "origin", "main", cwd=repo))
    have_refs = _remote_refs(remote)
    run("server", "stop", cwd=repo)
    for name in ("a", "r.git"):  # the same push again from the same state and paths, in-process
        shutil.rmtree(tmp_path / name)
        shutil.copytree(saved / name, tmp_path / name, symlinks=True)
    want = run("push", "origin", "main", cwd=repo, env=off)
    assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr)
    assert have.returncode == 0 and "pushed 1 refs" in have.stdout
    assert _remote_refs(remote) == have_refs and "refs/pf/heads/main" in have_refs
    run("log", "-n", "1", cwd=repo)  # a new server
    cases = [("push", "--json"), ("fetch",), ("fetch", "--json"), ("push", "nosuch"), ("fetch", "nosuch"),
             ("push", "origin", "nobranch")]
    sh("git", "remote", "add", "gone", tmp_path / "gone.git", cwd=repo)
    cases.append(("fetch", "gone"))
    for args in cases:
        want, have = run(*args, cwd=repo, env=off), on_the_server(repo, lambda: run(*args, cwd=repo))
        assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr), args
    assert {run(*a, cwd=repo).returncode for a in cases} == {0, 1, 2}


def _with_terminal(follower: int):
    """For ``preexec_fn``: a new session whose controlling terminal is the pseudo-terminal
    ``follower`` (its leader stays open in the test)."""
    import fcntl
    import termios

    def become() -> None:
        os.setsid()
        fcntl.ioctl(follower, termios.TIOCSCTTY, 0)
    return become


@pytest.mark.parametrize("entry", ["git-pf", "python"])
def test_a_push_with_a_controlling_terminal_runs_in_process(pushing, entry):
    repo, _, remote = pushing
    args = [str(BIN / "git-pf")] if entry == "git-pf" else [sys.executable, "-m", "git_pf"]
    pid, before = served(repo)
    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([*args, "push", "origin", "main"], cwd=repo, env=_env(), capture_output=True, text=True,
                              stdin=subprocess.DEVNULL, preexec_fn=_with_terminal(follower), timeout=120)
    finally:
        os.close(leader)
        os.close(follower)
    assert proc.returncode == 0, proc.stderr
    assert "refs/pf/heads/main" in _remote_refs(remote)
    assert served(repo)[1] == before or served(repo)[0] != pid  # the push ran in the client


def _slow_remote(remote: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A pre-receive hook that notes its pid and waits until ``release`` exists."""
    started, release = tmp_path / "hook.pid", tmp_path / "release"
    hook = remote / "hooks" / "pre-receive"
    hook.write_text(f"#!/bin/sh\necho $$ > {started}\nwhile [ ! -e {release} ]; do sleep 0.05; done\n")
    hook.chmod(0o755)
    return started, release


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_push_whose_client_is_killed_leaves_the_remote_as_it_was_and_runs_again(pushing, tmp_path, how):
    repo, _, remote = pushing
    started, release = _slow_remote(remote, tmp_path)
    for _ in range(5):  # until the push is the server's (a server stops when git-pf's files change)
        pid, before = served(repo)
        started.unlink(missing_ok=True)
        client = subprocess.Popen([str(BIN / "git-pf"), "push", "origin", "main"], cwd=repo, env=_env(),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                  start_new_session=True)
        hook = int(wait_for(lambda: started.exists() and started.read_text().strip(), "the remote's hook to start"))
        now = status(repo)
        if now["running"] and now["pid"] == pid and now["commands_running"] == 1:
            break
        os.killpg(client.pid, signal.SIGKILL)  # in-process: its group is the push
        client.communicate()
        wait_for(lambda: not alive(hook), "the remote's hook to end")
    else:
        raise AssertionError("no server stayed up for the push")
    client.send_signal(how)
    out, err = client.communicate(timeout=60)
    if how == signal.SIGKILL:
        assert client.returncode == -signal.SIGKILL
    else:  # as in-process: one line, 128 + N
        assert client.returncode == 128 + how and err.strip().splitlines()[-1] == "git pf: interrupted", err
        assert "Traceback" not in err
    wait_for(lambda: not alive(hook), "the remote's hook to end with the push")
    wait_for(lambda: status(repo)["commands_running"] == 0, "the push to end")
    assert "refs/pf/" not in _remote_refs(remote)
    assert not [p for p in (remote / "refs").rglob("*.lock")]
    release.touch()
    again = run("push", "origin", "main", cwd=repo)
    assert again.returncode == 0, again.stderr
    mine = sh("git", "rev-parse", "refs/pf/heads/main", cwd=repo).stdout
    assert sh("git", "rev-parse", "refs/pf/heads/main", cwd=remote).stdout == mine
