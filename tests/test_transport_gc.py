"""git pf gc (roots: refs, remote-tracking refs, running mounts; prune date) and git pf fsck."""
from __future__ import annotations

import json
import os
import subprocess
import time

from transport_helpers import origin_of, pf, rand_bytes, sh

MiB = 1024 * 1024


def _objects(repo):
    root = repo / ".git" / "pf" / "objects"
    return {p.parent.name + p.name for p in root.glob("??/*")}


def _setup(tmp_path):
    """Repo with branch 'keep' (file A) and branch 'drop' (file B); returns (repo, image of drop)."""
    repo = tmp_path / "a"
    pf("init", repo, cwd=tmp_path)
    for name, seed in (("drop", 2), ("keep", 1)):
        sb = tmp_path / f"sb-{name}"
        sb.mkdir()
        (sb / "big.bin").write_bytes(rand_bytes(2 * MiB, seed))
        pf("snapshot", "--fs-root", sb, "--name", name, "--switch", "-m", name, cwd=repo)
    drop = pf("show", "drop", "--json", cwd=repo).stdout
    return repo, json.loads(drop)["id"]


def _age(repo, days: float):
    old = time.time() - days * 86400
    for p in (repo / ".git" / "pf" / "objects").glob("??/*"):
        os.utime(p, (old, old))


def test_gc_removes_only_unreached_objects_older_than_prune_date(tmp_path):
    repo, drop = _setup(tmp_path)
    all_objects = _objects(repo)
    pf("branch", "-d", "drop", cwd=repo)
    # default prune date (two weeks): fresh objects of an unreferenced image survive
    assert json.loads(pf("gc", "--json", cwd=repo).stdout)["removed"] == []
    assert _objects(repo) == all_objects
    _age(repo, 30)
    dry = json.loads(pf("gc", "--dry-run", "--json", cwd=repo).stdout)
    assert dry["removed"] and _objects(repo) == all_objects
    done = json.loads(pf("gc", "--json", cwd=repo).stdout)
    assert sorted(done["removed"]) == sorted(dry["removed"])
    assert _objects(repo) == all_objects - set(done["removed"])
    pf("checkout", "keep", "--into", tmp_path / "c", cwd=repo)  # what is reached is intact
    assert pf("fsck", cwd=repo).returncode == 0


def test_gc_keeps_objects_of_running_mounts_and_remote_tracking_refs(tmp_path):
    repo, drop = _setup(tmp_path)
    all_objects = _objects(repo)
    # a remote-tracking ref keeps 'drop' alive
    origin_of(repo, tmp_path)
    pf("push", "origin", "drop", cwd=repo)
    pf("branch", "-d", "drop", cwd=repo)
    assert json.loads(pf("gc", "--prune=now", "--json", cwd=repo).stdout)["removed"] == []
    sh("git", "update-ref", "-d", "refs/pf/remotes/origin/heads/drop", cwd=repo)
    # a running mount of 'drop' keeps it alive; a dead one does not
    mounts = repo / ".git" / "pf" / "mounts"
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        (mounts / "m1").mkdir(parents=True)
        (mounts / "m1" / "mount.json").write_text(json.dumps(
            {"image": drop, "pid": sleeper.pid, "mountpoint": str(tmp_path / "mnt"), "mode": "ro"}))
        assert json.loads(pf("gc", "--prune=now", "--json", cwd=repo).stdout)["removed"] == []
    finally:
        sleeper.kill()
        sleeper.wait()
    removed = json.loads(pf("gc", "--prune=now", "--json", cwd=repo).stdout)["removed"]
    assert removed and _objects(repo) == all_objects - set(removed)


def test_gc_rejects_a_bad_prune_date(tmp_path):
    repo, _ = _setup(tmp_path)
    proc = pf("gc", "--prune=not-a-date-at-all", cwd=repo, check=False)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1 and "--prune" in proc.stderr


def test_fsck_reports_corrupt_and_missing_objects_and_bad_refs(tmp_path):
    repo, drop = _setup(tmp_path)
    assert pf("fsck", cwd=repo).returncode == 0
    objects = sorted((repo / ".git" / "pf" / "objects").glob("??/*"), key=lambda p: p.stat().st_size)
    corrupt, missing = objects[-1], objects[-2]
    os.chmod(corrupt, 0o644)
    corrupt.write_bytes(corrupt.read_bytes()[:-4] + b"oops")
    missing.unlink()
    sh("git", "update-ref", "refs/pf/objects", sh("git", "hash-object", "-w", "--stdin", cwd=repo,
                                                  input="x").stdout.strip(), cwd=repo)
    proc = pf("fsck", "--json", cwd=repo, check=False)
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and not report["ok"]
    text = "\n".join(report["problems"])
    assert corrupt.parent.name + corrupt.name in text
    assert missing.parent.name + missing.name in text
    assert "refs/pf/objects" in text


def test_fsck_counts_objects_a_remote_holds_as_available(tmp_path):
    repo, _ = _setup(tmp_path)
    remote = origin_of(repo, tmp_path)
    pf("push", "origin", "--all", cwd=repo)
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    b = tmp_path / "b"
    assert not _objects(b)  # nothing fetched yet
    assert pf("fsck", cwd=b).returncode == 0
