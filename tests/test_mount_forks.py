"""Forks mounted at once share one lower image yet stay independent."""
from __future__ import annotations

import json
import os

from mount_helpers import describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def test_two_forks_mounted_at_once_stay_independent(pf):
    sb = make_sandbox(pf.root)
    base = snapshot(pf, sb, "--name", "task")
    out = json.loads(pf.run("fork", "task", "-n", "2", "--mount", str(pf.root / "forks"), "--json").stdout)
    pf.mountpoints.update(row["mountpoint"] for row in out)
    one, two = (pf.root / "forks" / row["name"] for row in out)
    assert [row["name"] for row in out] == ["task-fork-1", "task-fork-2"]
    assert describe(one) == describe(two) == describe(sb)

    (one / "src" / "main.py").write_text("print('one')\n")
    (one / "empty" / "new.txt").write_text("n\n")  # an image directory known only from fs.attrs
    os.unlink(one / "run.sh")
    (two / "only-two.txt").write_text("2\n")
    os.rename(two / "src", two / "code")
    assert (two / "code" / "main.py").read_text() == "print('hello')\n"
    assert (one / "run.sh").exists() is False and (two / "run.sh").exists()
    assert not (one / "only-two.txt").exists() and (one / "src").is_dir()

    id1 = pf.run("snapshot", "--mount", str(one), "-q").stdout.strip()
    id2 = pf.run("snapshot", "--mount", str(two), "-q").stdout.strip()
    for name, new, mnt in (("task-fork-1", id1, one), ("task-fork-2", id2, two)):
        log = json.loads(pf.run("log", "--json", name).stdout)
        assert log[0]["id"] == new and log[2]["id"] == base  # snapshot -> fork -> base
        pf.run("checkout", new, "--into", str(pf.root / f"co-{name}"))
        assert describe(pf.root / f"co-{name}") == describe(mnt)
    assert describe(one) != describe(two)
    assert describe(pf.root / "co-task-fork-1")["empty/deeper"][0] == "dir"
    states = json.loads(pf.run("mounts", "--json").stdout)
    assert sorted(s["image"] for s in states) == sorted([id1, id2])
    assert {s["mode"] for s in states} == {"rw"} and len({s["pid"] for s in states}) == 2
    for mnt in (one, two):
        pf.run("umount", str(mnt))
    assert pf.states() == []
