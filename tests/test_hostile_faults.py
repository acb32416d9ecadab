"""Faults: an interrupted command ends with one line, moves no branch and leaves no temp file behind."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from git_pf import Repo
from git_pf.core import liveness
from git_pf.mount import snapshot as mount_snapshot
from git_pf.core.errors import EXIT_NEGATIVE, PfError
from mount_helpers import VENV_BIN, pf, requires_fuse, snapshot  # noqa: F401

BIG = 40 << 20  # enough that a snapshot takes a moment


def _wait_gone(pid: int, seconds: float = 15.0) -> bool:
    deadline = time.monotonic() + seconds
    while liveness.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    return not liveness.pid_alive(pid)


def _tip(repo_dir: Path, branch: str) -> str | None:
    proc = subprocess.run(["git", "rev-parse", "-q", "--verify", f"refs/pf/heads/{branch}"], cwd=repo_dir,
                          capture_output=True, text=True)
    return proc.stdout.strip() or None


def _temp_files(repo_dir: Path) -> list[str]:
    tmp = repo_dir / ".git" / "pf" / "objects" / "tmp"
    return sorted(os.listdir(tmp)) if tmp.is_dir() else []


def _rw_mount_with_big_change(pf) -> tuple[Path, int, bytes]:
    sb = pf.root / "sandbox"
    sb.mkdir()
    (sb / "a.txt").write_text("a\n")
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    data = os.urandom(BIG)
    (mnt / "big.bin").write_bytes(data)
    return mnt, pf.states()[0]["pid"], data


class KillDaemon:
    """A snapshot layer that kills the mount daemon while the snapshot is being written
    (after the freeze, before the mount is asked to follow the new image)."""

    name = "kill"

    def __init__(self, pid: int):
        self.pid = pid

    def write(self, repo, edit, parent) -> dict:
        os.kill(self.pid, signal.SIGKILL)
        assert _wait_gone(self.pid)
        return {}


@requires_fuse
def test_mount_daemon_killed_during_snapshot_gives_one_line_and_a_whole_image(pf):
    mnt, pid, data = _rw_mount_with_big_change(pf)
    before = _tip(pf.repo, "agent")
    with pytest.raises(PfError) as info:
        mount_snapshot.snapshot_mount(Repo.open(pf.repo), mnt, layers=(KillDaemon(pid),))
    err = info.value
    assert err.code == EXIT_NEGATIVE and "\n" not in err.message and "ended during the snapshot" in err.message
    after = _tip(pf.repo, "agent")
    assert after != before and after[:12] in err.message  # the image is whole, so the branch moved to it
    assert pf.run("fsck").returncode == 0
    state = pf.states()[0]
    assert state["image"] == after  # the mount's record follows the image that holds its changes
    pf.run("umount", str(mnt))
    pf.mount("agent", mnt, "--rw")
    assert (mnt / "big.bin").read_bytes() == data
    assert pf.states()[0]["image"] == after


@requires_fuse
def test_mount_daemon_killed_before_it_answers_the_snapshot_moves_no_branch(pf):
    mnt, pid, _ = _rw_mount_with_big_change(pf)
    before = _tip(pf.repo, "agent")
    os.kill(pid, signal.SIGSTOP)  # the snapshot connects, asks to freeze, and waits for the answer

    def kill_once_connected():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if any(link.startswith("socket:") for link in _fd_links()):
                break
            time.sleep(0.01)
        os.kill(pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_once_connected)
    killer.start()
    try:
        with pytest.raises(PfError) as info:
            mount_snapshot.snapshot_mount(Repo.open(pf.repo), mnt)
    finally:
        killer.join()
    err = info.value
    assert err.code == EXIT_NEGATIVE and "\n" not in err.message and "no image was written" in err.message
    assert _tip(pf.repo, "agent") == before
    assert _temp_files(pf.repo) == []


def _fd_links() -> list[str]:
    out = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:  # closed meanwhile
            pass
    return out


def test_gc_removes_temp_files_of_gone_writers_at_once_and_keeps_live_ones(repo, run_pf, tmp_path):
    done = subprocess.Popen(["true"])
    done.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        tmp = repo.store.root / "tmp"
        tmp.mkdir(parents=True, exist_ok=True)
        (tmp / f"obj-{done.pid}-0").write_bytes(b"x" * 1000)
        (tmp / f"obj-{live.pid}-0").write_bytes(b"y" * 10)
        dry = json.loads(run_pf("gc", "--prune=now", "--dry-run", "--json", cwd=tmp_path / "repo").stdout)
        assert (dry["temp_removed"], dry["temp_live"]) == (1, 1) and len(os.listdir(tmp)) == 2
        out = json.loads(run_pf("gc", "--prune=now", "--json", cwd=tmp_path / "repo").stdout)
        assert (out["temp_removed"], out["temp_bytes"], out["temp_live"]) == (1, 1000, 1)
        assert os.listdir(tmp) == [f"obj-{live.pid}-0"]
    finally:
        live.kill()
        live.wait()
    out = json.loads(run_pf("gc", "--json", cwd=tmp_path / "repo").stdout)  # gone now: any prune date will do
    assert out["temp_removed"] == 1 and os.listdir(tmp) == []


def test_gc_removes_temp_file_whose_pid_was_reused_by_a_later_process(repo, run_pf, tmp_path):
    tmp = repo.store.root / "tmp"
    tmp.mkdir(parents=True, exist_ok=True)
    live = subprocess.Popen(["sleep", "60"])
    try:
        old = tmp / f"obj-{live.pid}-0"
        old.write_bytes(b"z")
        an_hour_ago = time.time() - 3600
        os.utime(old, (an_hour_ago, an_hour_ago))  # written before that process started
        out = json.loads(run_pf("gc", "--prune=now", "--json", cwd=tmp_path / "repo").stdout)
        assert out["temp_removed"] == 1 and not old.exists()
    finally:
        live.kill()
        live.wait()


def test_kill_9_of_git_dispatcher_ends_git_pf_child_with_nothing_left(tmp_path):
    repo_dir = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo_dir)], check=True)
    sb = tmp_path / "sandbox"
    sb.mkdir()
    for i in range(3):
        (sb / f"f{i}.bin").write_bytes(os.urandom(BIG // 2))
    env = dict(os.environ, PATH=f"{VENV_BIN}:{os.environ.get('PATH', '')}")
    git = subprocess.Popen(["git", "pf", "snapshot", "--fs-root", str(sb), "--name", "agent"], cwd=repo_dir, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 30
        while not _temp_files(repo_dir) and git.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)  # the snapshot is writing objects
        children = Path(f"/proc/{git.pid}/task/{git.pid}/children").read_text().split()
        assert len(children) == 1, "git runs git-pf as its child"
        child = int(children[0])
        git.kill()
        _, err = git.communicate(timeout=30)
        assert _wait_gone(child), "git-pf went on after its dispatcher was killed"
    finally:
        if git.poll() is None:
            git.kill()
    assert err.splitlines() == ["git pf: interrupted"]
    assert _tip(repo_dir, "agent") is None
    assert _temp_files(repo_dir) == []


def test_sigterm_ends_a_snapshot_like_ctrl_c_with_exit_143(tmp_path):
    repo_dir = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo_dir)], check=True)
    sb = tmp_path / "sandbox"
    sb.mkdir()
    (sb / "big.bin").write_bytes(os.urandom(BIG))
    proc = subprocess.Popen([f"{VENV_BIN}/git-pf", "snapshot", "--fs-root", str(sb)], cwd=repo_dir,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not _temp_files(repo_dir) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    proc.terminate()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM
    assert err.splitlines() == ["git pf: interrupted"]
    assert _tip(repo_dir, "main") is None and _temp_files(repo_dir) == []
