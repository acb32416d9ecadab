"""Writing objects as packs: concurrent writers of the same objects, a long run's pack count,
storage failures (the failpoint) and a git gc running while objects are written."""
from __future__ import annotations

import multiprocessing
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pygit2
import pytest

from conftest import git_fsck_clean
from git_pf.core.errors import WriteFailed
from git_pf.store import packfile
from git_pf.store.packfile import BLOB, FAILPOINT_ENV, PackWriter, RunPackWriter, read_index

ROUNDS = 200  # the race this guards against hit about one round in 30 with two threads


def _packs(git_dir: Path) -> list[Path]:
    return sorted((git_dir / "objects" / "pack").glob("*.pack"))


def _open_removed() -> int:
    """Files this process holds open that are removed (merged-away packs libgit2 kept open)."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").endswith(" (deleted)")
        except OSError:
            pass
    return n


def _round_objects(k: int) -> list[bytes]:
    return [b"round %d object %d\n" % (k, i) * 20 for i in range(30)]


def _flush_same(git_dir: str, k: int, barrier) -> None:
    """Queue round k's objects, wait for the other writer, flush: both write byte-identical packs."""
    writer = PackWriter(pygit2.Repository(git_dir))
    for data in _round_objects(k):
        writer.add(BLOB, data)
    barrier.wait()
    writer.flush()


def _check_round(git: pygit2.Repository, k: int) -> None:
    for data in _round_objects(k):
        oid = pygit2.hash(data)
        assert git.odb.read(oid)[1] == data


def test_two_threads_writing_the_same_new_objects_both_succeed(repo):
    git_dir = str(repo.git_dir)
    errors = []
    for k in range(ROUNDS):
        barrier = threading.Barrier(2)

        def one():
            try:
                _flush_same(git_dir, k, barrier)
            except Exception as e:  # noqa: BLE001 - what the other thread must not see
                errors.append(e)
        threads = [threading.Thread(target=one) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    git = pygit2.Repository(git_dir)
    for k in range(ROUNDS):
        _check_round(git, k)
    assert not [p for p in (repo.git_dir / "objects" / "pack").iterdir() if p.name.startswith("tmp_")]


def _process_rounds(git_dir: str, barrier, failed) -> None:
    for k in range(ROUNDS):
        try:
            _flush_same(git_dir, k, barrier)
        except WriteFailed:
            failed.value += 1
            barrier.wait()  # nothing else waits for this round's writer: keep in step


def test_two_processes_writing_the_same_new_objects_both_succeed(repo):
    ctx = multiprocessing.get_context("fork")
    barrier, failed = ctx.Barrier(2), ctx.Value("i", 0)
    procs = [ctx.Process(target=_process_rounds, args=(str(repo.git_dir), barrier, failed)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    assert failed.value == 0
    git = pygit2.Repository(str(repo.git_dir))
    for k in range(ROUNDS):
        _check_round(git, k)


def test_a_run_of_many_flushes_leaves_a_few_packs_and_every_object(repo):
    writer = RunPackWriter(repo.git)
    written = []
    for step in range(300):
        data = b"step %d\n" % step * 40
        written.append((writer.add(BLOB, data), data))
        writer.flush()
        assert pygit2.Oid(raw=written[-1][0]) in repo.git.odb  # a step reads its objects back
        assert len(_packs(repo.git_dir)) <= 12  # about log2(steps), never one per step
    assert _open_removed() < RunPackWriter.FORGET_AFTER  # merged-away packs are not kept open
    writer.consolidate()
    assert len(_packs(repo.git_dir)) == 1
    fresh = pygit2.Repository(str(repo.git_dir))
    for oid, data in written:
        assert fresh.odb.read(pygit2.Oid(raw=oid))[1] == data
    (idx,) = (repo.git_dir / "objects" / "pack").glob("*.idx")
    assert len(read_index(idx.read_bytes())) == 300


def test_a_run_never_merges_a_pack_of_merge_objects_again(repo, monkeypatch):
    # a merge of the whole run so far at every doubling made the recorder's memory grow with the run
    monkeypatch.setattr(RunPackWriter, "MERGE_OBJECTS", 16)
    writer = RunPackWriter(repo.git)
    for step in range(200):
        writer.add(BLOB, b"run step %d\n" % step)
        writer.flush()
        assert all(n < 2 * 16 for _, _, n in writer.packs)  # no merge ever copies more than about two caps
    assert len(writer.packs) >= 200 // 32
    writer.consolidate()  # the run's end merges no more than a merge during the run
    assert all(n < 2 * 16 for _, _, n in writer.packs)
    assert sum(n < 16 for _, _, n in writer.packs) <= 1  # the small packs became one
    packs = _packs(repo.git_dir)
    assert len(packs) == len(writer.packs) <= 200 // 16 + 1
    idxs = (repo.git_dir / "objects" / "pack").glob("*.idx")
    assert sum(len(read_index(idx.read_bytes())) for idx in idxs) == 200


def test_a_merge_skips_packs_a_gc_took_and_keeps_the_objects(repo):
    writer = RunPackWriter(repo.git)
    blobs = [writer.add(BLOB, b"before gc %d\n" % i) for i in range(5)]
    writer.flush()
    first = list(writer.packs)
    subprocess.run(["git", "--git-dir", str(repo.git_dir), "gc", "-q"], check=True)  # keeps what is recent
    blobs.append(writer.add(BLOB, b"after gc\n"))
    writer.flush()
    writer.consolidate()
    assert not first[0][0].with_suffix(".pack").exists()
    fresh = pygit2.Repository(str(repo.git_dir))
    assert all(pygit2.Oid(raw=b) in fresh.odb for b in blobs)


def test_a_failed_write_keeps_the_queue_for_the_next_flush(repo, monkeypatch):
    writer = PackWriter(repo.git)
    oid = writer.add(BLOB, b"kept across a failure\n")
    monkeypatch.setenv(FAILPOINT_ENV, str(packfile._writes[0] + 1))  # the next pack write fails, and every later one
    with pytest.raises(WriteFailed, match="No space left"):
        writer.flush()
    assert pygit2.Oid(raw=oid) not in repo.git.odb
    monkeypatch.delenv(FAILPOINT_ENV)
    writer.flush()
    assert repo.git.odb.read(pygit2.Oid(raw=oid))[1] == b"kept across a failure\n"


def test_snapshots_write_no_loose_objects(repo, tmp_path, run_pf):
    world = tmp_path / "world"
    world.mkdir()
    for i in range(5):
        (world / f"f{i}").write_text(f"file {i}\n")
        run_pf("snapshot", "--fs-root", world, cwd=tmp_path / "repo")
    loose = [p for p in (repo.git_dir / "objects").iterdir() if len(p.name) == 2]
    assert loose == []
    assert len(_packs(repo.git_dir)) == 5
    git_fsck_clean(tmp_path / "repo")


def test_a_merge_that_cannot_be_written_leaves_the_packs_and_the_run_goes_on(repo, monkeypatch):
    writer = RunPackWriter(repo.git)
    monkeypatch.setenv(FAILPOINT_ENV, str(packfile._writes[0] + 3))  # two flushes, then the merge of the two fails
    first = writer.add(BLOB, b"one\n" * 100)
    writer.flush()
    second = writer.add(BLOB, b"two\n" * 100)
    writer.flush()  # returns: the failed merge leaves both packs
    assert len(_packs(repo.git_dir)) == 2
    third = writer.add(BLOB, b"three\n" * 100)
    with pytest.raises(WriteFailed):
        writer.flush()
    monkeypatch.delenv(FAILPOINT_ENV)
    writer.consolidate()
    fresh = pygit2.Repository(str(repo.git_dir))
    assert all(pygit2.Oid(raw=o) in fresh.odb for o in (first, second, third))
    assert len(_packs(repo.git_dir)) == 1


def _loose(git_dir: Path) -> list[Path]:
    return [f for d in (git_dir / "objects").iterdir() if len(d.name) == 2 for f in d.iterdir()]


def _gc_loop(git_dir: Path, stop: threading.Event, done: list) -> None:
    """``git gc`` again and again (each one packs what is loose and removes the ``objects/xx``
    directories it empties), a fresh loose object before each so every round has some to take."""
    k = 0
    while not (k and stop.is_set()):  # one round at least
        k += 1
        subprocess.run(["git", "--git-dir", str(git_dir), "hash-object", "-w", "--stdin"], input=b"gc bait %d\n" % k,
                       capture_output=True, check=True)
        subprocess.run(["git", "--git-dir", str(git_dir), "gc", "-q"], capture_output=True, check=True)
        done.append(k)


def test_forks_and_blame_verdicts_write_no_loose_objects(repo, tmp_path):
    from git_pf.blame import store as blame_store

    world = tmp_path / "world"
    world.mkdir()
    (world / "a.txt").write_text("a\n")
    tip = repo.snapshot(world, name="main").image.id
    before = set(_loose(repo.git_dir))
    forks = repo.fork(tip, 3, explore="try")
    blame_store.write_verdict(repo.git, "r", 1, 0, forks[0].id, "flip", "a reason", 0.5)
    assert set(_loose(repo.git_dir)) == before
    assert [repo.git[f.id].parents[0].id for f in forks] == [pygit2.Oid(hex=tip)] * 3


GC_ROUNDS = 12


def test_fork_merge_and_blame_verdict_writes_succeed_under_a_gc_loop(repo, tmp_path):
    """Forks, merges and blame verdicts written while ``git gc`` runs over and over: every write
    succeeds, every ref names a complete image, and fsck is clean (the fixture)."""
    from git_pf.blame import store as blame_store

    world = tmp_path / "world"
    world.mkdir()
    (world / "base.txt").write_text("base\n")
    repo.snapshot(world, name="main")
    stop, done = threading.Event(), []
    gc = threading.Thread(target=_gc_loop, args=(repo.git_dir, stop, done))
    gc.start()
    try:
        for k in range(GC_ROUNDS):
            side = repo.fork("main", 1, prefix=f"side{k}")[0].name
            other = shutil.copytree(world, tmp_path / f"other{k}")
            (other / f"side{k}.txt").write_text(f"side {k}\n")
            repo.snapshot(other, name=side)
            (world / "base.txt").write_text(f"main {k}\n")
            repo.snapshot(world, name="main")
            merged = repo.merge(side, into="main")
            assert merged.status == "merged", merged.status
            (world / f"side{k}.txt").write_text(f"side {k}\n")  # the world as merged
            blame_store.write_verdict(repo.git, "r", k, 0, merged.image.id, "no-flip", "-", 0.0)
    finally:
        stop.set()
        gc.join()
    assert done, "the gc loop never finished a round"
    subprocess.run(["git", "--git-dir", str(repo.git_dir), "gc", "-q", "--prune=now"], check=True)
    git = pygit2.Repository(str(repo.git_dir))  # refs as the gc left them (packed)
    tree = git[git.references["refs/pf/heads/main"].target].tree
    assert {e.name for e in tree["world/fs"]} == {"base.txt"} | {f"side{k}.txt" for k in range(GC_ROUNDS)}
