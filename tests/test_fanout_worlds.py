"""A fan-out's forks run one after another in one world directory (docs/scale.md, "One world per
worker"): each fork must see exactly what a fresh checkout of its image gives (files, modes,
symlinks, empty directories, xattrs), never what the fork before it wrote, ignored files and
leftover processes included."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import time
from pathlib import Path

from git_pf.executors.worlds import ReusedWorld
from git_pf.ops.snapshot import SnapshotRequest, take
from git_pf.runs.replaying import fresh_world
from transport_helpers import sh
from world_helpers import gone


def listing(root: Path) -> dict:
    """Everything a checkout decides of a directory: each path's type, mode, bytes or link target,
    and xattrs (the root's mode and xattrs too)."""
    out = {}

    def one(path: str) -> tuple:
        st = os.lstat(path)
        link = stat.S_ISLNK(st.st_mode)
        xattrs = {} if link else {k: os.getxattr(path, k) for k in os.listxattr(path)}
        body = os.readlink(path) if link else Path(path).read_bytes() if stat.S_ISREG(st.st_mode) else None
        return stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), body, xattrs

    for top, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(top, name)
            out[os.path.relpath(path, root)] = one(path)
    out["."] = one(str(root))
    return out


def _world(tmp_path: Path) -> Path:
    """A world of every kind of path a checkout writes."""
    w = tmp_path / "w"
    (w / "sub" / "deep").mkdir(parents=True)
    (w / "a.txt").write_text("a\n")
    (w / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(w / "run.sh", 0o755)
    (w / "sub" / "b.txt").write_text("bbbb\n")
    (w / "sub" / "deep" / "c.txt").write_text("c\n")
    os.symlink("a.txt", w / "link")
    (w / "empty").mkdir()
    (w / ".gitignore").write_text("*.log\n")
    (w / "ro").mkdir()
    (w / "ro" / "in.txt").write_text("in\n")
    os.chmod(w / "ro", 0o555)
    (w / "x.txt").write_text("x\n")
    os.setxattr(w / "x.txt", "user.k", b"v")
    os.setxattr(w / "sub", "user.d", b"dv")
    return w


def _chmod_back(path: Path) -> None:
    """Make a test's tree removable again (a fork may leave a directory without permissions)."""
    for top, dirs, _ in os.walk(path):
        for d in dirs:
            full = os.path.join(top, d)
            if not os.path.islink(full):
                os.chmod(full, 0o700)


FORKS = [  # what each fork's agent does to its world (a shell command run there)
    "echo new > new.txt; echo junk > junk.log; rm a.txt; printf 'BBBB\\n' > sub/b.txt",  # same size
    "rm -rf sub; rm link; echo notalink > link; chmod 644 run.sh; mkfifo pipe; echo z > ../beside.txt",
    "chmod 755 ro; echo more > ro/more.txt; chmod 000 empty; mkdir -p d/e; echo f > d/e/f.log",
    "chmod 0 sub/deep; rm -f x.txt; echo x > x.txt; ln -s /etc evil; chmod 700 .; mv sub/b.txt sub/moved",
    "chmod 777 sub; touch -d 2001-01-01 a.txt; rmdir empty; mkdir empty; ln run.sh hard",
    "true",
]


def test_each_fork_of_a_reused_world_sees_what_a_fresh_checkout_gives(repo, tmp_path):
    image = take(repo, SnapshotRequest(fs_root=_world(tmp_path), branch="main")).image.id
    want = listing(fresh_world(repo, image, tmp_path / "fresh"))
    with ReusedWorld(repo) as worlds:
        for agent in FORKS + FORKS:
            world = worlds.enter(image)
            assert listing(world) == want, agent
            subprocess.run(["sh", "-c", agent], cwd=world, check=True, stderr=subprocess.DEVNULL)
            # a directory attribute the shell cannot change
            os.setxattr(world, "user.q", b"1")
            os.setxattr(world / "ro", "user.r", b"1")
        assert worlds.moved == 2 * len(FORKS) - 1  # every world after the first was moved, not checked out
        assert listing(worlds.enter(image)) == want
    _chmod_back(tmp_path)


def test_a_change_in_the_clock_tick_of_the_recording_is_seen(repo, tmp_path):
    image = take(repo, SnapshotRequest(fs_root=_world(tmp_path), branch="main")).image.id
    want = listing(fresh_world(repo, image, tmp_path / "fresh"))
    with ReusedWorld(repo) as worlds:
        for _ in range(20):
            world = worlds.enter(image)
            target = world / "a.txt"
            before = os.lstat(target)
            with open(target, "r+b") as f:  # at once: same size, same mtime, maybe the same ctime
                f.write(b"b")
            os.utime(target, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert listing(worlds.enter(image)) == want
        kept = os.lstat(worlds.world / "x.txt").st_ino
        assert listing(worlds.enter(image)) == want
        assert os.lstat(worlds.world / "x.txt").st_ino == kept  # what no fork changed stays where it is


def test_a_world_of_another_image_is_checked_out_afresh(repo, tmp_path):
    first = take(repo, SnapshotRequest(fs_root=_world(tmp_path), branch="main")).image.id
    os.chmod(tmp_path / "w" / "ro", 0o755)
    (tmp_path / "w" / "a.txt").write_text("other\n")
    second = take(repo, SnapshotRequest(fs_root=tmp_path / "w", branch="main")).image.id
    with ReusedWorld(repo) as worlds:
        for image, name in ((first, "f1"), (second, "f2"), (second, "f3"), (first, "f4")):
            assert listing(worlds.enter(image)) == listing(fresh_world(repo, image, tmp_path / name))
            (worlds.world / "left.txt").write_text("left\n")
        assert worlds.moved == 1
    _chmod_back(tmp_path)


LIST = ("find . -path ./seen.txt -prune -o -printf '%y %m %p %l\\n' | LC_ALL=C sort > ../seen; "
        "find . -type f ! -name seen.txt -exec sha1sum {} + | LC_ALL=C sort >> ../seen; mv ../seen seen.txt")
AGENT = (LIST + "; case $GIT_PF_FORK in "
         "1) echo one > one.txt; echo junk > junk.log; rm a.txt; "
         "sleep 300 & [ -z \"$PIDS\" ] || echo $! > \"$PIDS/1\";; "
         "2) rm -rf sub; echo two > two.log; chmod 600 run.sh; ln -s a.txt link2; mkdir -p d/e;; "
         "3) echo 3 >> sub/b.txt; echo 3 >> big.bin; mkfifo pipe; chmod 700 empty; mkdir x.log; echo in > x.log/f;; "
         "4) mv a.txt moved.txt; echo four > four.txt;; esac; echo \"pf-score: $GIT_PF_FORK\"")


def fanout_world(root: Path) -> Path:
    """A world for the CLI tests (no xattrs: ``find`` lists the rest); ``big.bin`` goes to the side
    store (``pf.largeFileThreshold`` 1k)."""
    sh("git", "config", "pf.largeFileThreshold", "1k", cwd=root)
    w = root.parent / "cli-world"
    (w / "sub").mkdir(parents=True)
    (w / "big.bin").write_bytes(bytes(range(256)) * 16)
    (w / "a.txt").write_text("a\n")
    (w / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(w / "run.sh", 0o755)
    (w / "sub" / "b.txt").write_text("b\n")
    os.symlink("a.txt", w / "link")
    (w / "empty").mkdir()
    (w / ".gitignore").write_text("*.log\n")
    return w


def check_forks(root: Path, rows: list[dict], fresh: Path) -> None:
    """Each fork saw main's world as a fresh checkout has it, and its image holds its own changes."""
    subprocess.run(["sh", "-c", LIST], cwd=fresh, check=True)
    want = (fresh / "seen.txt").read_text()
    show = lambda r, path: sh("git", "show", f"{r['image']}:world/fs/{path}", cwd=root, check=False)
    names = lambda r: set(sh("git", "ls-tree", "-r", "--name-only", f"{r['image']}:world/fs", cwd=root).stdout.split())
    for r in rows:
        assert r["exit"] == 0, r
        assert show(r, "seen.txt").stdout == want, r["fork"]
    by = {r["fork"]: r for r in rows}
    base = {".gitignore", "a.txt", "big.bin", "run.sh", "sub/b.txt", "link", "seen.txt"}
    assert names(by[1]) == base - {"a.txt"} | {"one.txt"}
    assert names(by[2]) == base - {"sub/b.txt"} | {"link2"}
    assert names(by[3]) == base and show(by[3], "sub/b.txt").stdout == "b\n3\n"
    assert names(by[4]) == base - {"a.txt"} | {"moved.txt", "four.txt"}
    for k in set(by) - {1, 2, 3, 4}:
        assert names(by[k]) == base


def test_fanout_forks_on_one_thread_each_see_a_fresh_world_and_no_process_of_the_fork_before(repo, run_pf,
                                                                                              tmp_path):
    root = repo.git_dir.parent
    run_pf("snapshot", "--fs-root", fanout_world(root), "-q", cwd=root)
    pids = tmp_path / "pids"
    pids.mkdir()
    out = json.loads(run_pf("fanout", "main", "-n", "6", "--jobs", "1", "--json", "--", "sh", "-c", AGENT,
                            cwd=root, env={"PIDS": str(pids)}).stdout)
    run_pf("checkout", "main", "--into", tmp_path / "fresh", cwd=root)
    check_forks(root, out["forks"], tmp_path / "fresh")
    pid = int((pids / "1").read_text())
    end = time.monotonic() + 10  # a killed process is reaped by init a moment later
    while not gone(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert gone(pid)  # what fork 1 left running was killed when its CMD exited
