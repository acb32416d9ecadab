"""Mount fixes found by trying the product as a new user: what a mount may hide, where umount
works from, and that a mount snapshot ignores what a full snapshot ignores."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from mount_helpers import VENV_BIN, describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def _one_line_error(proc: subprocess.CompletedProcess, code: int) -> str:
    assert proc.returncode == code, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    return proc.stderr


def _world(pf, image: str) -> tuple[str, str]:
    """The world/fs tree id and the fs.attrs text of an image."""
    def git(*args):
        return subprocess.run(["git", "-C", str(pf.repo), *args], capture_output=True, text=True, check=True).stdout
    rev = f"refs/pf/heads/{image}"
    return git("rev-parse", f"{rev}:world/fs").strip(), git("cat-file", "-p", f"{rev}:world/fs.attrs.jsonl")


def test_mount_over_a_non_empty_directory_is_refused_unless_force(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.root / "work"
    mnt.mkdir()
    (mnt / "notes.txt").write_text("mine\n")
    err = _one_line_error(pf.run("mount", "agent", str(mnt), check=False), 2)
    assert "not empty" in err and "--force" in err
    assert os.listdir(mnt) == ["notes.txt"] and (mnt / "notes.txt").read_text() == "mine\n"
    assert pf.states() == []

    pf.mount("agent", mnt, "--force")
    assert describe(mnt) == describe(sb) and not (mnt / "notes.txt").exists()
    pf.run("umount", str(mnt))
    assert os.listdir(mnt) == ["notes.txt"] and (mnt / "notes.txt").read_text() == "mine\n"


def test_fork_mount_over_a_non_empty_fork_directory_is_refused_before_any_fork(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "task")
    forks = pf.root / "forks"
    (forks / "task-fork-2").mkdir(parents=True)
    (forks / "task-fork-2" / "keep.txt").write_text("k\n")
    err = _one_line_error(pf.run("fork", "task", "-n", "2", "--mount", str(forks), check=False), 2)
    assert "task-fork-2" in err and "not empty" in err
    heads = subprocess.run(["git", "-C", str(pf.repo), "for-each-ref", "refs/pf/heads/"], capture_output=True,
                           text=True, check=True).stdout
    assert "task" in heads and "task-fork" not in heads  # no fork was written
    assert pf.states() == [] and (forks / "task-fork-2" / "keep.txt").read_text() == "k\n"

    out = json.loads(pf.run("fork", "task", "-n", "2", "--mount", str(forks), "--force", "--json").stdout)
    pf.mountpoints.update(row["mountpoint"] for row in out)
    assert [row["name"] for row in out] == ["task-fork-1", "task-fork-2"]
    assert describe(forks / "task-fork-2") == describe(sb)


def test_umount_from_an_unrelated_directory_unmounts_and_drops_the_record(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    elsewhere = pf.root / "elsewhere"
    elsewhere.mkdir()
    pf.run("umount", str(mnt), cwd=elsewhere)
    assert str(mnt) not in Path("/proc/self/mounts").read_text()
    assert pf.states() == [] and os.listdir(mnt) == []


def test_mounts_outside_a_repository_lists_every_git_pf_mount_with_its_repository(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt")
    elsewhere = pf.root / "elsewhere"
    elsewhere.mkdir()
    rows = [r for r in json.loads(pf.run("mounts", "--json", cwd=elsewhere).stdout) if r["mountpoint"] == str(mnt)]
    assert len(rows) == 1
    assert rows[0]["repository"] == os.path.realpath(pf.repo / ".git")
    assert rows[0]["status"] == "mounted" and rows[0]["mode"] == "ro" and rows[0]["image"] == pf.states()[0]["image"]
    human = pf.run("mounts", cwd=elsewhere).stdout
    assert any(str(mnt) in line and os.path.realpath(pf.repo / ".git") in line for line in human.splitlines())
    # inside the repository the listing is the repository's own, as before
    inside = json.loads(pf.run("mounts", "--json").stdout)
    assert [r["mountpoint"] for r in inside] == [str(mnt)] and "repository" not in inside[0]


def test_mount_snapshot_leaves_out_what_an_fs_root_snapshot_ignores_and_keeps_it_in_the_mount(pf):
    sb = make_sandbox(pf.root)
    (sb / ".gitignore").write_text("*.log\n")  # a .gitignore in the lower image
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    cache = mnt / ".pytest_cache"  # as pytest writes it: its own .gitignore holding '*'
    (cache / "v" / "cache").mkdir(parents=True)
    (cache / ".gitignore").write_text("# Created by pytest automatically.\n*\n")
    (cache / "v" / "cache" / "nodeids").write_text("[]\n")
    (mnt / "run.log").write_text("log\n")  # matched by the image's .gitignore
    (mnt / "src" / "debug.log").write_text("deep\n")
    (mnt / "src" / "new.py").write_text("x = 1\n")  # kept
    (mnt / "tmpdir").mkdir()
    (mnt / "tmpdir" / ".gitignore").write_text("*.tmp\n")  # a new nested .gitignore
    (mnt / "tmpdir" / "a.tmp").write_text("t\n")
    (mnt / "tmpdir" / "b.txt").write_text("b\n")

    copy = pf.root / "copy"  # the same tree as a plain directory
    shutil.copytree(mnt, copy, symlinks=True)
    full = snapshot(pf, copy, "--name", "full")
    pf.run("snapshot", "--mount", str(mnt), "-q")
    assert _world(pf, "agent") == _world(pf, "full")
    tree = subprocess.run(["git", "-C", str(pf.repo), "ls-tree", "-r", "--name-only",
                           "refs/pf/heads/agent:world/fs"],
                          capture_output=True, text=True, check=True).stdout.split()
    assert "src/new.py" in tree and "tmpdir/b.txt" in tree and "run.log" not in tree
    assert not any(p.startswith(".pytest_cache") for p in tree) and full

    # the ignored files are still in the mount, after the snapshot emptied the upper layer
    assert (cache / "v" / "cache" / "nodeids").read_text() == "[]\n"
    assert (mnt / "run.log").read_text() == "log\n" and (mnt / "src" / "debug.log").read_text() == "deep\n"
    assert (mnt / "tmpdir" / "a.tmp").read_text() == "t\n"
    assert describe(mnt) == describe(copy)
    # and a second snapshot (nothing changed) stays equal to the full one
    pf.run("snapshot", "--mount", str(mnt), "-q", "--allow-empty")
    assert _world(pf, "agent") == _world(pf, "full")


def test_snapshot_mount_of_a_stopped_daemon_does_not_hang_while_parsing(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    (mnt / "new.txt").write_text("n\n")
    pid = pf.states()[0]["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        proc = subprocess.Popen([os.path.join(VENV_BIN, "git-pf"), "snapshot", "--mount", str(mnt), "-q"],
                                cwd=pf.repo, env=pf.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not _connected(proc.pid):
            time.sleep(0.02)
        assert _connected(proc.pid), "the command never reached the daemon's control socket"
        os.kill(pid, signal.SIGKILL)  # the daemon ends without answering the freeze
        _, err = proc.communicate(timeout=30)
    finally:
        os.kill(pid, signal.SIGKILL) if os.path.exists(f"/proc/{pid}") else None
    assert proc.returncode == 1 and len(err.strip().splitlines()) == 1 and "no image was written" in err, err


def _connected(pid: int) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:
        return False
    links = []
    for fd in fds:
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except OSError:
            pass
    return any(link.startswith("socket:") for link in links)
