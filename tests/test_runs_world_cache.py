"""Worlds kept between commands (docs/record.md, "The world cache"): a replay takes the world a
replay before it left in the cache and brings it back to exactly what a fresh checkout of step 0
gives, whatever the agent before did to it; two replays at once never share one; the cache can be
turned off. Real recorded runs (the demo agent behind a fake LLM server), the real CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from git_pf.testing.fakellm import FakeLLM
from runs_helpers import SCRIPT, record, report, step_ids
from world_helpers import gone

TESTS = Path(__file__).resolve().parent

# What the child does: list its world as it starts (test_fanout_worlds.listing: each path's type,
# mode, bytes or link target, xattrs) into $OUT, then make a mess of it when $MESS is set.
CHILD = """
import json, os, sys, time
sys.path.insert(0, os.environ["TESTS"])
from test_fanout_worlds import listing
w = os.environ["GIT_PF_WORLD"]
seen = {k: repr(v) for k, v in listing(w).items()}
out = os.environ["OUT"]
with open(out, "w") as f:
    json.dump({"listing": seen, "ino": os.stat(w).st_ino}, f)
if os.environ.get("BOTH"):  # wait until the other replay's child is running too
    open(out + ".started", "w").close()
    other = os.environ["BOTH"]
    end = time.monotonic() + 60
    while not os.path.exists(other + ".started") and time.monotonic() < end:
        time.sleep(0.02)
if os.environ.get("LEAVE"):  # a process left running, its output closed
    import subprocess
    left = subprocess.Popen(["sh", "-c", "sleep 300; echo late > late.txt"], cwd=w, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    open(out + ".pid", "w").write(str(left.pid))
if os.environ.get("MESS"):
    os.chdir(w)
    open("new.txt", "w").write("new")
    open("junk.log", "w").write("ignored by the world's .gitignore")
    open("same.txt", "w").write("SAME")  # the same size
    os.unlink("task.md")
    os.chmod("run.sh", 0o600)
    os.setxattr("keep.txt", "user.k", b"changed")
    os.setxattr("d", "user.new", b"x")
    os.mkfifo("pipe")
    os.makedirs("d/e/f")
    open("d/e/f/g.log", "w").write("g")
    os.chmod("ro", 0o755)
    open("ro/more.txt", "w").write("more")
    os.chmod("d/sub", 0)
    os.symlink("/etc", "evil")
"""


def _sandbox(sb: Path) -> None:
    (sb / "d" / "sub").mkdir(parents=True)
    (sb / "d" / "sub" / "x.txt").write_text("x\n")
    (sb / ".gitignore").write_text("*.log\n")
    (sb / "same.txt").write_text("same")
    (sb / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(sb / "run.sh", 0o755)
    (sb / "keep.txt").write_text("keep\n")
    os.setxattr(sb / "keep.txt", "user.k", b"v")
    (sb / "ro").mkdir()
    (sb / "ro" / "in.txt").write_text("in\n")
    os.chmod(sb / "ro", 0o555)


def _recorded(repo, run_pf, tmp_path) -> Path:
    root = repo.git_dir.parent
    sb = tmp_path / "sb"
    sb.mkdir()
    _sandbox(sb)
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", sb, "--steps", "3")
    return root


def _replay(run_pf, root, tmp_path, out: Path, **env):
    env = dict(TESTS=str(TESTS), OUT=str(out), TMPDIR=str(tmp_path / "tmp"), **env)
    return run_pf("replay", "run", "--no-world-check", "--json", "--", sys.executable, "-c", CHILD, cwd=root,
                  env=env)


def _fresh(run_pf, root, tmp_path) -> dict:
    """What a fresh checkout of the run's step 0 holds, listed as the child lists its world."""
    from test_fanout_worlds import listing

    run_pf("checkout", step_ids(root, "run")[0], "--into", tmp_path / "fresh", cwd=root)
    return {k: repr(v) for k, v in listing(tmp_path / "fresh").items()}


def _cached(tmp_path) -> list[str]:
    top = tmp_path / "tmp"
    return sorted(str(p.relative_to(top)) for p in top.glob("pf-worlds-*/*/*"))


def test_a_second_replay_takes_the_cached_world_back_to_a_fresh_checkout(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    first = _replay(run_pf, root, tmp_path, tmp_path / "one.json", MESS="1", LEAVE="1")
    assert report(first.stdout)["world_reused"] is False and report(first.stdout)["world"] is None
    assert len(_cached(tmp_path)) == 1  # the world the first replay's agent messed up is kept
    pid = int((tmp_path / "one.json.pid").read_text())
    end = time.monotonic() + 10  # a killed process is reaped by init a moment later
    while not gone(pid) and time.monotonic() < end:
        time.sleep(0.05)
    assert gone(pid)  # what the agent left running cannot write to the kept world
    second = _replay(run_pf, root, tmp_path, tmp_path / "two.json")
    assert report(second.stdout)["world_reused"] is True
    one, two = (json.loads((tmp_path / n).read_text()) for n in ("one.json", "two.json"))
    assert two["ino"] == one["ino"]  # the same directory
    fresh = _fresh(run_pf, root, tmp_path)
    assert one["listing"] == fresh
    assert two["listing"] == fresh  # nothing of what the first agent did is left
    assert len(_cached(tmp_path)) == 1


def test_two_replays_at_once_each_get_a_world_of_their_own(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    _replay(run_pf, root, tmp_path, tmp_path / "zero.json", MESS="1")  # one world in the cache
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    base = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", TESTS=str(TESTS),
                TMPDIR=str(tmp_path / "tmp"), MESS="1")
    procs = [subprocess.Popen(["git-pf", "replay", "run", "--no-world-check", "--json", "--", sys.executable, "-c",
                               CHILD], cwd=root, env=dict(base, OUT=str(out), BOTH=str(other)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for out, other in ((a, b), (b, a))]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sorted(report(o)["world_reused"] for o, _ in outs) == [False, True]
    fresh = _fresh(run_pf, root, tmp_path)
    seen = [json.loads(p.read_text()) for p in (a, b)]
    assert seen[0]["ino"] != seen[1]["ino"]
    assert seen[0]["listing"] == seen[1]["listing"] == fresh
    assert len(_cached(tmp_path)) == 2
    _replay(run_pf, root, tmp_path, tmp_path / "three.json")
    assert json.loads((tmp_path / "three.json").read_text())["listing"] == fresh
    assert len(_cached(tmp_path)) == 2  # pf.worldCache.maxWorlds: 2 by default


def test_the_cache_turned_off_keeps_no_world(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    subprocess.run(["git", "config", "pf.worldCache.maxWorlds", "false"], cwd=root, check=True)
    for n in range(2):
        out = _replay(run_pf, root, tmp_path, tmp_path / f"{n}.json", MESS="1")
        assert report(out.stdout)["world_reused"] is False
    assert list((tmp_path / "tmp").iterdir()) == []
    subprocess.run(["git", "config", "pf.worldCache.maxWorlds", "many"], cwd=root, check=True)
    bad = run_pf("replay", "run", "--", "true", cwd=root, check=False, env={"TMPDIR": str(tmp_path / "tmp")})
    assert bad.returncode == 2 and "pf.worldCache.maxWorlds" in bad.stderr and "Traceback" not in bad.stderr


def test_gc_removes_the_cached_worlds(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    _replay(run_pf, root, tmp_path, tmp_path / "one.json")
    assert len(_cached(tmp_path)) == 1
    out = json.loads(run_pf("gc", "--json", cwd=root, env={"TMPDIR": str(tmp_path / "tmp")}).stdout)
    assert out["worlds_removed"] == 1 and _cached(tmp_path) == []
    second = _replay(run_pf, root, tmp_path, tmp_path / "two.json")
    assert report(second.stdout)["world_reused"] is False


def test_a_run_from_a_fork_takes_the_world_a_replay_left(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    _replay(run_pf, root, tmp_path, tmp_path / "one.json", MESS="1")
    (tmp_path / "reply.txt").write_text("Changed my mind.")
    run_pf("fork", "run", "--at-step", "2", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    env = dict(TESTS=str(TESTS), OUT=str(tmp_path / "two.json"), TMPDIR=str(tmp_path / "tmp"))
    run_pf("run", "alt", "--upstream", "http://127.0.0.1:9", "--no-world-check", "--json", "--", sys.executable, "-c",
           CHILD, cwd=root, env=env)
    one, two = (json.loads((tmp_path / n).read_text()) for n in ("one.json", "two.json"))
    assert two["ino"] == one["ino"]  # the replay's world, taken from the cache
    assert two["listing"] == _fresh(run_pf, root, tmp_path)
    assert len(_cached(tmp_path)) == 1


def test_a_damaged_record_or_a_killed_commands_world_is_never_trusted(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    _replay(run_pf, root, tmp_path, tmp_path / "one.json", MESS="1")
    [entry] = (tmp_path / "tmp").glob("pf-worlds-*/*/*")
    record_file = entry / ".record"
    record_file.write_bytes(record_file.read_bytes()[:-7])  # cut short
    killed = entry.parent / "live.999999999.0a0b"  # a command killed while its world was taken
    (killed / "world").mkdir(parents=True)
    (killed / ".record").write_bytes(record_file.read_bytes())
    two = _replay(run_pf, root, tmp_path, tmp_path / "two.json")
    assert report(two.stdout)["world_reused"] is False  # checked out afresh
    assert json.loads((tmp_path / "two.json").read_text())["listing"] == _fresh(run_pf, root, tmp_path)
    assert not killed.exists()
    assert len(_cached(tmp_path)) == 1


def test_an_interrupted_replay_keeps_nothing_of_its_world(repo, run_pf, tmp_path):
    root = _recorded(repo, run_pf, tmp_path)
    (tmp_path / "tmp").mkdir()
    _replay(run_pf, root, tmp_path, tmp_path / "zero.json")  # one world in the cache
    out = tmp_path / "one.json"
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}", TESTS=str(TESTS),
               TMPDIR=str(tmp_path / "tmp"), OUT=str(out), BOTH=str(tmp_path / "never"))
    proc = subprocess.Popen(["git-pf", "replay", "run", "--no-world-check", "--", sys.executable, "-c", CHILD],
                            cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 60
    while not Path(str(out) + ".started").exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.02)
    assert _cached(tmp_path)[0].split("/")[-1].startswith("live.")  # the cached world, taken
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err
    assert _cached(tmp_path) == []
