"""The command server (docs/server.md): commands it runs give what they give in-process, in
parallel; a killed client takes its command with it; a killed server costs one line; a change
of git-pf's files starts a new server; another user is refused; ``pf.server false`` and
``GIT_PF_SERVER=0`` turn it off; its file watcher never makes a wrong image."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import BIN

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the command server needs Linux")


def _env(**extra) -> dict:
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    env.pop("GIT_PF_SERVER", None)
    env.update(extra)
    return env


def pf(*args, cwd, env=None, input=None, check=True):
    proc = subprocess.run([str(BIN / "git-pf"), *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=env or _env(), input=input, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"git-pf {args} exited {proc.returncode}: {proc.stderr}")
    return proc


def status(repo, env=None) -> dict:
    return json.loads(pf("server", "status", "--json", cwd=repo, env=env).stdout)


def wait_for(predicate, what: str, limit: float = 60.0):
    """Poll until ``predicate()`` is true (a bound on waiting, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"gave up waiting for {what}")


def running_server(repo, env=None) -> dict:
    """Run a served command until a server answers; its status."""
    pf("log", cwd=repo, env=env)
    return wait_for(lambda: (lambda s: s if s["running"] else None)(status(repo, env)), "a server")


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[-1][:1] != "Z"
    except OSError:
        return False


def processes_of(git_dir: Path) -> list[int]:
    """Every process running the server of ``git_dir`` (the server and the commands it forked)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"git_pf.cli.server" in cmd and os.fsencode(str(git_dir)) in cmd and alive(int(name)):
                out.append(int(name))
    return out


@pytest.fixture
def world(tmp_path):
    """A repository with three images of a small sandbox; its server stopped at the end."""
    repo, sb = tmp_path / "repo", tmp_path / "sb"
    pf("init", repo, cwd=tmp_path)
    (sb / "d").mkdir(parents=True)
    ids = []
    for i in range(3):
        (sb / "d" / f"f{i}.txt").write_text(f"{i}\n")
        ids.append(pf("snapshot", "--fs-root", sb, "-q", "-m", f"image {i}", cwd=repo).stdout.strip())
    yield repo, sb, ids
    pf("server", "stop", cwd=repo, check=False)
    git_dir = (repo / ".git").resolve()
    wait_for(lambda: not processes_of(git_dir), "the server to end")


def test_eight_clients_at_once_get_their_own_output_and_status(world):
    repo, sb, ids = world
    pid = running_server(repo)["pid"]
    jobs = [("show", i) for i in ids] + [("show", "no-such-rev"), ("log", "-n", "2"), ("diff", ids[0], ids[2]),
                                         ("log", "--bogus"), ("ls",)]
    assert len(jobs) >= 8
    off = _env(GIT_PF_SERVER="0")
    expected = [pf(*j, cwd=repo, env=off, check=False) for j in jobs]
    with ThreadPoolExecutor(len(jobs)) as pool:
        got = list(pool.map(lambda j: pf(*j, cwd=repo, check=False), jobs * 2))
    for want, have in zip(expected * 2, got):
        assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr)
    assert {p.returncode for p in got} == {0, 2}
    after = status(repo)
    assert after["pid"] == pid and after["served"] >= 2 * len(jobs)


def _blocked_command(repo, sb):
    """A served command that waits on its stdin (a pipe we hold) until we close it."""
    return subprocess.Popen([str(BIN / "git-pf"), "snapshot", "--fs-root", str(sb), "--messages", "/dev/stdin"],
                            cwd=repo, env=_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _reading(repo, client) -> int | None:
    """The pid of the served command once it is blocked reading the client's stdin."""
    for pid in processes_of((repo / ".git").resolve()):
        try:
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
            if os.readlink(f"/proc/{pid}/fd/0") == os.readlink(f"/proc/{client.pid}/fd/0") and "pipe" in wchan:
                return pid
        except OSError:
            continue
    return None


def test_a_killed_client_takes_its_command_with_it(world):
    repo, sb, _ = world
    server = running_server(repo)["pid"]
    client = _blocked_command(repo, sb)
    command = wait_for(lambda: _reading(repo, client), "the command to start")
    os.kill(client.pid, signal.SIGKILL)
    client.wait()
    wait_for(lambda: status(repo)["commands_running"] == 0, "the command to end")
    assert not alive(command) and alive(server)
    client.stdin.close()


def test_a_signal_to_the_client_reaches_the_command(world):
    repo, sb, _ = world
    running_server(repo)
    client = _blocked_command(repo, sb)
    wait_for(lambda: _reading(repo, client), "the command to start")
    client.send_signal(signal.SIGTERM)
    out, err = client.communicate(timeout=60)
    assert client.returncode == 128 + signal.SIGTERM
    assert "interrupted" in err and "Traceback" not in err
    assert pf("log", "-n", "1", cwd=repo).stdout  # and nothing was half-written
    client.stdin.close()


def test_server_killed_mid_command_costs_one_line_and_a_rerun_works(world):
    repo, sb, _ = world
    server = running_server(repo)["pid"]
    client = _blocked_command(repo, sb)
    command = wait_for(lambda: _reading(repo, client), "the command to start")
    os.kill(server, signal.SIGKILL)
    wait_for(lambda: not alive(server), "the server to die")  # before the command could finish
    out, err = client.communicate(timeout=60)
    assert client.returncode != 0 and out == "", (out, err)
    assert len(err.splitlines()) == 1 and err.startswith("git pf: the command server stopped")
    wait_for(lambda: not alive(command), "the command to die with its server")
    (sb / "d" / "new.txt").write_text("new\n")
    image = pf("snapshot", "--fs-root", sb, "-q", cwd=repo).stdout.strip()
    _exact(repo, sb, image)


def copied_install(repo, tmp_path) -> tuple[Path, dict, dict]:
    """A copy of git-pf's package that a test may change as a reinstall would, the environment that
    runs it, and the status of a fresh server running it (the old server stopped)."""
    pf("server", "stop", cwd=repo)
    site = tmp_path / "site"
    shutil.copytree(Path(__import__("git_pf").__file__).parent, site / "git_pf",
                    ignore=shutil.ignore_patterns("__pycache__"))
    env = _env(PYTHONPATH=str(site))
    return site, env, running_server(repo, env)


def test_a_change_of_git_pf_files_starts_a_new_server(world, tmp_path):
    repo, _, ids = world
    site, env, first = copied_install(repo, tmp_path)
    assert first["pid"] and pf("show", ids[0], cwd=repo, env=env).returncode == 0
    with open(site / "git_pf" / "core" / "errors.py", "a") as f:  # what a reinstall does to a file
        f.write("\n# changed\n")
    assert ids[1] in pf("show", ids[1], cwd=repo, env=env).stdout  # still right: in-process
    second = running_server(repo, env)
    assert second["pid"] != first["pid"]
    wait_for(lambda: not alive(first["pid"]), "the stale server to end")


def test_pf_server_false_and_the_environment_turn_it_off(world):
    repo, sb, ids = world
    server = running_server(repo)["pid"]
    subprocess.run(["git", "config", "pf.server", "false"], cwd=repo, check=True)
    assert ids[2] in pf("show", cwd=repo).stdout  # refused by the server, run in-process
    wait_for(lambda: not alive(server), "the server to end")
    for _ in range(3):
        assert ids[2] in pf("show", cwd=repo).stdout
    time.sleep(0.5)
    assert not status(repo)["running"] and not processes_of((repo / ".git").resolve())
    subprocess.run(["git", "config", "--unset", "pf.server"], cwd=repo, check=True)
    for _ in range(3):
        assert ids[2] in pf("show", cwd=repo, env=_env(GIT_PF_SERVER="0")).stdout
    time.sleep(0.5)
    assert not processes_of((repo / ".git").resolve())
    assert not status(repo, _env(GIT_PF_SERVER="0"))["running"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another user")
def test_another_user_is_refused():
    base = Path(tempfile.mkdtemp(prefix="pf-srv-"))  # pytest's tmp dirs are private to root
    try:
        os.chmod(base, 0o711)
        repo = base / "repo"
        pf("init", repo, cwd=base)
        status_ = running_server(repo)
        sock_path = str(base / "sock")  # the socket's private directory stays 0700: a hard link reaches it
        os.link(status_["socket"], sock_path)
        os.chmod(sock_path, 0o666)  # only the peer check stands between that user and the server
        code = ("import socket, sys\n"  # the wire by hand: that user may not reach git-pf's code
                "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n"
                "body = (6).to_bytes(4, 'big') + b'status'\n"
                "try:\n    s.sendall(len(body).to_bytes(4, 'big') + body)\n"
                "except OSError:\n    pass  # it may answer and hang up before reading\n"
                "reply = b''\n"
                "while len(reply) < 8 or len(reply) < 4 + int.from_bytes(reply[:4], 'big'):\n"
                "    chunk = s.recv(4096)\n"
                "    if not chunk: break\n"
                "    reply += chunk\n"
                "n = int.from_bytes(reply[4:8], 'big'); print(reply[8:8 + n].decode())\n")
        python = shutil.which("python3", path="/usr/bin:/bin")
        if python is None:
            pytest.skip("no system python3 to run as another user")
        proc = subprocess.run([python, "-c", code, sock_path], capture_output=True, text=True,
                              preexec_fn=lambda: (os.setgid(65534), os.setuid(65534)), timeout=60)
        if "Permission denied" in proc.stderr or "ModuleNotFound" in proc.stderr:
            pytest.skip(f"that user cannot reach the socket here: {proc.stderr.strip()[-200:]}")
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == "refuse"
        assert status(repo)["served"] == status_["served"]  # it ran nothing for that user
        pf("server", "stop", cwd=repo)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _world_tree(repo, image: str) -> str:
    from git_pf import Repo

    r = Repo.open(repo)
    return str(r.git[image].tree["world"]["fs"].id) if "world" in r.git[image].tree else ""


def _exact(repo, sb, served_image: str) -> None:
    """The served snapshot's world equals what a fresh in-process walk finds (no stat cache)."""
    cache = repo / ".git" / "pf" / "statcache"
    shutil.rmtree(cache, ignore_errors=True)
    fresh = pf("snapshot", "--fs-root", sb, "-q", "--allow-empty", "--name", "check", cwd=repo,
               env=_env(GIT_PF_SERVER="0")).stdout.strip()
    assert _world_tree(repo, served_image) == _world_tree(repo, fresh)


def test_the_watcher_sees_changes_and_an_overflow_never_makes_a_wrong_image(world):
    repo, sb, _ = world
    with open("/proc/sys/fs/inotify/max_queued_events") as f:
        queue = int(f.read())
    if queue > 100_000:
        pytest.skip("the inotify queue is too long to overflow quickly here")
    running_server(repo)
    for i in range(3):
        (sb / "d" / f"w{i}.txt").write_text(f"w{i}\n")
        pf("snapshot", "--fs-root", sb, "-q", cwd=repo)
    assert str(sb.resolve()) in status(repo)["watching"]
    # moved, removed and new directories: seen by the watch
    (sb / "d" / "sub").mkdir()
    (sb / "d" / "sub" / "x").write_text("x")
    os.rename(sb / "d", sb / "e")
    image = pf("snapshot", "--fs-root", sb, "-q", cwd=repo).stdout.strip()
    _exact(repo, sb, image)
    pf("snapshot", "--fs-root", sb, "-q", "--allow-empty", cwd=repo)  # a cache again, watched
    (sb / "e" / "sub" / "x").write_text("y")
    image = pf("snapshot", "--fs-root", sb, "-q", cwd=repo).stdout.strip()
    _exact(repo, sb, image)
    pf("snapshot", "--fs-root", sb, "-q", "--allow-empty", cwd=repo)
    # a burst longer than the kernel's event queue, then one more change elsewhere
    (sb / "burst").mkdir()
    for i in range(queue // 2 + 100):
        with open(sb / "burst" / f"b{i % 2}", "w") as f:
            f.write(str(i))
    (sb / "quiet").mkdir(exist_ok=True)
    (sb / "e" / "sub" / "x").write_text("after the burst")
    image = pf("snapshot", "--fs-root", sb, "-q", cwd=repo).stdout.strip()
    _exact(repo, sb, image)


def test_a_watched_snapshot_lists_only_the_directories_that_changed(world):
    """The server's spare hands a snapshot the watcher's word from the first watched snapshot on:
    the next one lists the changed directory and its ancestors, not the whole sandbox."""
    repo, sb, _ = world
    for i in range(6):
        (sb / f"t{i}" / "u").mkdir(parents=True)
        (sb / f"t{i}" / "u" / "f.txt").write_text(f"{i}\n")
    for _ in range(3):  # a server restarted in between (git-pf's files changed) walks again: try once more
        pid = running_server(repo)["pid"]
        (sb / "t0" / "u" / "f.txt").write_text("first\n")
        pf("snapshot", "--fs-root", sb, "-q", cwd=repo)  # walks and starts the watch
        (sb / "t1" / "u" / "f.txt").write_text("second\n")
        pf("snapshot", "--fs-root", sb, "-q", cwd=repo)  # walks or not: saves the cache the watch vouches for
        (sb / "t2" / "u" / "f.txt").write_text("third\n")
        out = json.loads(pf("snapshot", "--fs-root", sb, "--json", cwd=repo).stdout)
        if status(repo)["pid"] == pid:
            break
    total = 1 + 1 + 6 * 2  # the root, d, t0..t5 and their u
    assert not out["unchanged"]
    assert out["dirs_listed"] <= 3 < total  # the root, t2 and t2/u
    _exact(repo, sb, out["id"])
    off = json.loads(pf("snapshot", "--fs-root", sb, "--json", "--allow-empty", cwd=repo,
                        env=_env(GIT_PF_SERVER="0")).stdout)
    assert off["dirs_listed"] == total  # in-process: every directory


def test_a_served_command_loads_nothing_heavy_in_the_client(world):
    """The client of a served command imports neither Typer, pygit2 nor any command code."""
    repo, _, ids = world
    running_server(repo)
    code = ("import sys, json\nsys.argv = ['git-pf', 'show', sys.argv[1]]\nimport git_pf.cli\n"
            "try:\n    git_pf.cli.main()\nexcept SystemExit as e:\n    code = e.code\n"
            "sys.stderr.write('MODULES ' + json.dumps([code, sorted(sys.modules)]) + '\\n')\n")
    proc = subprocess.run([sys.executable, "-c", code, ids[1]], cwd=repo, capture_output=True, text=True,
                          env=_env(), timeout=60)
    line = [l for l in proc.stderr.splitlines() if l.startswith("MODULES ")]
    exit_code, modules = json.loads(line[-1][len("MODULES "):])
    assert exit_code == 0 and ids[1] in proc.stdout
    assert not [m for m in modules if m.split(".")[0] in ("pygit2", "typer", "click", "zstandard", "rich")]
    assert sorted(m for m in modules if m.startswith("git_pf")) == ["git_pf", "git_pf.cli", "git_pf.cli.client", "git_pf.core", "git_pf.core.gitdir"]


def test_a_repository_too_deep_for_a_socket_path_gets_a_private_short_one(tmp_path):
    repo = tmp_path / ("d" * 60) / ("e" * 60) / "repo"
    pf("init", repo, cwd=tmp_path)
    try:
        st = running_server(repo)
        sock = Path(st["socket"])
        assert len(os.fsencode(str(sock))) <= 107 and not str(sock).startswith(str(tmp_path))
        assert oct(sock.stat().st_mode & 0o777) == "0o600" and oct(sock.parent.stat().st_mode & 0o777) == "0o700"
        assert pf("log", cwd=repo).returncode == 0 and status(repo)["served"] >= 1
    finally:
        pf("server", "stop", cwd=repo, check=False)


def test_a_served_repository_copies_with_its_server_running(world, tmp_path):
    """The socket lives in the user's private directory, never in the repository: a plain copy
    of a served repository works (``shutil.copytree`` refuses a socket) and gets its own server."""
    repo, _, ids = world
    st = running_server(repo)
    assert not Path(st["socket"]).is_relative_to(repo)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, symlinks=True)
    try:
        assert ids[2] in pf("log", cwd=copy).stdout
        other = running_server(copy)
        assert other["socket"] != st["socket"] and other["pid"] != st["pid"]
    finally:
        pf("server", "stop", cwd=copy, check=False)
