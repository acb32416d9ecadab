"""Real programs in an --rw mount, then a snapshot of it: a checkout of the new image equals the mount."""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import tarfile
import textwrap

from mount_helpers import describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def _git(cwd, *args):
    env = dict(os.environ, GIT_AUTHOR_NAME="a", GIT_AUTHOR_EMAIL="a@e", GIT_COMMITTER_NAME="a",
               GIT_COMMITTER_EMAIL="a@e", GIT_CONFIG_NOSYSTEM="1", HOME=str(cwd))
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True).stdout


SCRIPT = textwrap.dedent("""
    import os, sys
    root = sys.argv[1]
    os.makedirs(os.path.join(root, "out", "logs"), exist_ok=True)
    for i in range(20):
        tmp = os.path.join(root, "out", f"r{i}.tmp")
        with open(tmp, "w") as f:
            f.write(f"result {i}\\n" * (i + 1))
        os.replace(tmp, os.path.join(root, "out", f"r{i}.txt"))      # atomic-replace pattern
    os.rename(os.path.join(root, "src"), os.path.join(root, "source"))  # a directory from the image
    os.rename(os.path.join(root, "out", "logs"), os.path.join(root, "logs"))  # a new directory
    with open(os.path.join(root, "run.sh"), "a") as f:                  # O_APPEND on an image file
        f.write("echo appended\\n")
    with open(os.path.join(root, "sparse.bin"), "wb") as f:             # a hole then data
        f.seek(5_000_000)
        f.write(b"tail")
    os.unlink(os.path.join(root, "secret.txt"))
    os.chmod(os.path.join(root, "source", "main.py"), 0o700)
    os.setxattr(os.path.join(root, "source", "main.py"), "user.step", b"2")
    os.truncate(os.path.join(root, "data.bin"), 1_000_000)             # a large file, cut short
    os.symlink("source/main.py", os.path.join(root, "link2"))
    os.rmdir(os.path.join(root, "empty", "deeper"))
""")


def _work(mnt, tmp):
    # git: init + two commits inside the mount
    repo = mnt / "proj"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    (repo / "a.txt").write_text("two\n")
    (repo / "b.txt").write_text("bee\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "second")
    assert _git(repo, "log", "--format=%s").split() == ["second", "first"]
    assert _git(repo, "status", "--porcelain") == ""
    assert _git(repo, "fsck", "--strict") == ""
    # a Python script writing and renaming files and directories
    script = tmp / "work.py"
    script.write_text(SCRIPT)
    subprocess.run(["python3", str(script), str(mnt)], check=True)
    # tar x
    src = tmp / "tarsrc"
    (src / "t" / "nested").mkdir(parents=True)
    (src / "t" / "nested" / "n.txt").write_text("nested\n")
    (src / "t" / "x.sh").write_text("#!/bin/sh\n")
    os.chmod(src / "t" / "x.sh", 0o755)
    os.symlink("x.sh", src / "t" / "lnk")
    with tarfile.open(tmp / "t.tar", "w") as tar:
        tar.add(src / "t", arcname="t")
    subprocess.run(["tar", "xf", str(tmp / "t.tar"), "-C", str(mnt)], check=True)
    # sqlite with a rollback journal, many transactions
    db = sqlite3.connect(mnt / "state.db")
    db.execute("PRAGMA journal_mode=DELETE")
    db.execute("CREATE TABLE kv (k INTEGER PRIMARY KEY, v TEXT)")
    for i in range(50):
        with db:
            db.execute("INSERT INTO kv VALUES (?, ?)", (i, "v" * i))
    with db:
        db.execute("DELETE FROM kv WHERE k % 2 = 0")
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    db.close()


def test_programs_in_rw_mount_then_snapshot_equals_checkout(pf, tmp_path):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    _work(mnt, tmp_path)
    seen = describe(mnt)
    assert seen["source/main.py"][1] == 0o700 and seen["source/main.py"][4] == {"user.origin": b"agent", "user.step": b"2"}
    assert "secret.txt" not in seen and "src" not in seen and seen["empty"][0] == "dir"

    new = pf.run("snapshot", "--mount", str(mnt), "-m", "after work", "-q").stdout.strip()
    assert new != image
    assert pf.run("log", "--json", "agent").stdout.count('"id"') == 2  # parent is the mounted image
    pf.run("checkout", new, "--into", str(pf.root / "co"))
    assert describe(pf.root / "co") == seen
    assert describe(mnt) == seen  # the mount now follows the new image, unchanged to its users
    listed = json.loads(pf.run("mounts", "--json").stdout)
    assert [m["image"] for m in listed] == [new] and listed[0]["upper_bytes"] == 0
    conn = sqlite3.connect(pf.root / "co" / "state.db")
    assert [r[0] for r in conn.execute("SELECT k FROM kv ORDER BY k")] == list(range(1, 50, 2))
    conn.close()

    # the same world captured from scratch gives the same tree: the mount snapshot missed nothing
    full = pf.run("snapshot", "--fs-root", str(pf.root / "co"), "--name", "full", "-q").stdout.strip()
    tree = lambda rev, path: subprocess.run(["git", "rev-parse", f"{rev}:{path}"], cwd=pf.repo, check=True,  # noqa: E731
                                            capture_output=True, text=True).stdout
    for path in ("world/fs", "world/fs.attrs.jsonl", "pf.json"):
        assert tree(new, path) == tree(full, path)

    # work continues in the same mount and snapshots again
    (mnt / "proj" / "c.txt").write_text("see\n")
    again = pf.run("snapshot", "--mount", str(mnt), "-q").stdout.strip()
    assert pf.run("diff", new, again).stdout.count("c.txt") >= 1


def test_snapshot_of_unchanged_mount_writes_no_image(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    (mnt / "run.sh").write_text((sb / "run.sh").read_text())  # copied up, same content
    out = pf.run("snapshot", "--mount", str(mnt), "-q").stdout.strip()
    assert out == image
    usage = pf.run("snapshot", check=False)
    assert usage.returncode == 2 and "exactly one of --fs-root and --mount" in usage.stderr


def test_snapshot_while_files_are_open_keeps_them_working(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    db = sqlite3.connect(mnt / "live.db")
    db.execute("CREATE TABLE t (x INTEGER)")
    with db:
        db.execute("INSERT INTO t VALUES (1)")
    log = open(mnt / "src" / "main.py", "a")
    log.write("# first\n")
    log.flush()
    first = pf.run("snapshot", "--mount", str(mnt), "-q").stdout.strip()
    with db:  # the same connection and file keep working after the switch
        db.execute("INSERT INTO t VALUES (2)")
    log.write("# second\n")
    log.close()
    db.close()
    second = pf.run("snapshot", "--mount", str(mnt), "-q").stdout.strip()
    assert second != first
    pf.run("checkout", second, "--into", str(pf.root / "co"))
    assert describe(pf.root / "co") == describe(mnt)
    assert (pf.root / "co" / "src" / "main.py").read_text().endswith("# first\n# second\n")
    conn = sqlite3.connect(pf.root / "co" / "live.db")
    assert [r[0] for r in conn.execute("SELECT x FROM t")] == [1, 2]
    conn.close()
