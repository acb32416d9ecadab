"""The command server's C client (docs/server.md, "The C client"): it hands served commands to
the server with their stdio, exit codes and signals, and runs everything else, and everything
the server cannot run (none there, killed with ``kill -9``, another protocol version), through
the Python entry point, with the same result as in-process."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import BIN
from test_cli_server import _env, _reading, alive, pf, processes_of, status, wait_for, world  # noqa: F401

from git_pf.cli import build_client, client

pytestmark = [pytest.mark.skipif(sys.platform != "linux", reason="the command server needs Linux"),
              pytest.mark.skipif(build_client.compiler() is None, reason="no C compiler")]

# The Python entry point, as the C client's fallback; it notes each time it runs.
FALLBACK = f"""#!{sys.executable}
import os, sys
with open(os.environ["PF_TEST_FALLBACKS"], "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\\n")
from git_pf.cli import main
sys.exit(main())
"""


def _build(where: Path) -> Path:
    where.mkdir(parents=True, exist_ok=True)
    fallback = where / "git-pf-python"
    fallback.write_text(FALLBACK)
    fallback.chmod(0o755)
    why = build_client.build(str(where / "git-pf"), str(fallback))
    assert why is None, why
    return where / "git-pf"


@pytest.fixture(scope="module")
def cclient(tmp_path_factory) -> Path:
    return _build(tmp_path_factory.mktemp("cclient"))


class Runner:
    """Runs the C client; ``fallbacks()`` are the commands it handed to the Python entry point."""

    def __init__(self, exe: Path, log: Path):
        self.exe, self.log = exe, log

    def env(self, **extra) -> dict:
        return _env(PF_TEST_FALLBACKS=str(self.log), **extra)

    def __call__(self, *args, cwd, env=None, **kw) -> subprocess.CompletedProcess:
        kw.setdefault("input", "")
        if "stdout" not in kw:
            kw["capture_output"] = True
        return subprocess.run([str(self.exe), *map(str, args)], cwd=cwd, text=True, env=env or self.env(),
                              timeout=120, **kw)

    def popen(self, *args, cwd, **kw) -> subprocess.Popen:
        return subprocess.Popen([str(self.exe), *map(str, args)], cwd=cwd, env=self.env(), text=True, **kw)

    def fallbacks(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@pytest.fixture
def c(cclient, tmp_path) -> Runner:
    return Runner(cclient, tmp_path / "fallbacks.log")


def _in_process(repo, *args, input=None):
    return pf(*args, cwd=repo, env=_env(GIT_PF_SERVER="0"), check=False, input=input)


def _serving(repo) -> dict:
    pf("log", cwd=repo)
    return wait_for(lambda: (lambda s: s if s["running"] else None)(status(repo)), "a server")


def test_served_commands_go_to_the_server_with_their_output_and_exit_codes(world, c, tmp_path):
    repo, sb, ids = world
    before = _serving(repo)["served"]
    cases = [("show", ids[1]), ("log", "-n", "2"), ("show", "no-such-rev"), ("log", "--bogus"), ("-h",),
             ("diff", "--stat", ids[0], ids[2])]
    for args in cases:
        want, have = _in_process(repo, *args), c(*args, cwd=repo)
        assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr), args
    assert c.fallbacks() == [] and status(repo)["served"] >= before + len(cases)
    # stdin and stdout are the client's own descriptors: messages read from stdin, the id into a file
    bad = ("snapshot", "--fs-root", sb, "-q", "--messages", "/dev/stdin")
    want, have = _in_process(repo, *bad, input="not json\n"), c(*bad, cwd=repo, input="not json\n")
    assert have.returncode == want.returncode == 2 and have.stderr == want.stderr and "/dev/stdin:1" in have.stderr
    (sb / "d" / "new.txt").write_text("new\n")
    with open(tmp_path / "out", "w") as out:
        proc = c(*bad, cwd=repo, stdout=out, stderr=subprocess.PIPE, input='{"role": "user", "content": "hi"}\n')
    assert proc.returncode == 0, proc.stderr
    image = (tmp_path / "out").read_text().strip()
    assert subprocess.run(["git", "cat-file", "-t", image], cwd=repo, capture_output=True, text=True).stdout == "commit\n"
    assert c.fallbacks() == []


def test_what_the_server_does_not_run_goes_to_the_python_entry_point(world, c):
    repo, _, _ = world
    _serving(repo)
    assert c("--version", cwd=repo).stdout.startswith("git-pf ")
    assert c("server", "status", cwd=repo).returncode == 0
    assert c("log", "-n", "1", cwd=repo, env=c.env(GIT_PF_SERVER="off")).returncode == 0
    assert c.fallbacks() == ["--version", "server status", "log -n 1"]


def test_a_server_killed_with_kill_9_costs_nothing_but_speed(world, c):
    repo, _, ids = world
    first = _serving(repo)["pid"]
    os.kill(first, signal.SIGKILL)
    wait_for(lambda: not alive(first), "the server to die")
    want = _in_process(repo, "log", "-n", "3")
    have = c("log", "-n", "3", cwd=repo)  # its socket is still there: nobody answers it
    assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr)
    assert c.fallbacks() == ["log -n 3"]
    second = wait_for(lambda: (lambda s: s if s["running"] else None)(status(repo)), "a new server")
    assert second["pid"] != first
    assert ids[2] in c("show", cwd=repo).stdout and c.fallbacks() == ["log -n 3"]


def test_a_server_killed_mid_command_costs_one_line(world, c):
    repo, sb, _ = world
    server = _serving(repo)["pid"]
    client_ = c.popen("snapshot", "--fs-root", sb, "--messages", "/dev/stdin", cwd=repo, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: _reading(repo, client_), "the command to start")
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: not alive(server), "the server to die")  # before the command could finish
    out, err = client_.communicate(timeout=60)
    assert client_.returncode == client.LOST and out == ""
    assert len(err.splitlines()) == 1 and err.startswith("git pf: the command server stopped")
    assert c.fallbacks() == []


def test_a_signal_to_the_c_client_reaches_the_command(world, c):
    repo, sb, _ = world
    _serving(repo)
    client_ = c.popen("snapshot", "--fs-root", sb, "--messages", "/dev/stdin", cwd=repo, stdin=subprocess.PIPE,
                      stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    wait_for(lambda: _reading(repo, client_), "the command to start")
    client_.send_signal(signal.SIGTERM)
    out, err = client_.communicate(timeout=60)
    assert client_.returncode == 128 + signal.SIGTERM
    assert "interrupted" in err and "Traceback" not in err
    assert c.fallbacks() == []


def test_eight_c_clients_at_once_get_their_own_output_and_status(world, c):
    repo, _, ids = world
    pid = _serving(repo)["pid"]
    jobs = [("show", i) for i in ids] + [("show", "no-such-rev"), ("log", "-n", "2"), ("diff", ids[0], ids[2]),
                                         ("log", "--bogus"), ("ls",)]
    expected = [_in_process(repo, *j) for j in jobs]
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda j: c(*j, cwd=repo), jobs * 2))
    for want, have in zip(expected * 2, got):
        assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr)
    assert {p.returncode for p in got} == {0, 2}
    # a server of another repository may stop this one (at most 8 per user): those after it fall back
    assert len(c.fallbacks()) < len(got) and (status(repo)["pid"] == pid or c.fallbacks())


def test_a_c_client_of_another_protocol_version_is_refused_and_falls_back(world, tmp_path, monkeypatch):
    repo, _, ids = world
    pid = _serving(repo)["pid"]
    monkeypatch.setattr(client, "PROTOCOL", client.PROTOCOL + 1)  # the C client built for a later protocol
    other = Runner(_build(tmp_path / "other"), tmp_path / "other.log")
    have = other("show", ids[0], cwd=repo)
    assert have.returncode == 0 and ids[0] in have.stdout
    assert other.fallbacks() == [f"show {ids[0]}"]
    assert status(repo)["pid"] == pid and processes_of((repo / ".git").resolve())


def test_make_installs_the_c_client_as_git_pf():
    """``git pf`` runs ``git-pf`` from PATH: the venv's is the C client, its fallback the Python entry point."""
    with open(BIN / "git-pf", "rb") as f:
        assert f.read(4) == b"\x7fELF", "run make venv: git-pf is still the Python console script"
    with open(BIN / build_client.FALLBACK_NAME) as f:
        assert "from git_pf.cli import main" in f.read()
