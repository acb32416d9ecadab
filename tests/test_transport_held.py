"""Objects the default adapter brings stay git blobs: a clone's checkout reads them from its own
object database (a local remote's packs linked in, or the pack git fetched), listed by the clone's
refs/pf/objects, never copied into pf/objects; they survive git gc, serve further pushes, and
git pf gc unlists them once no image reaches them."""
from __future__ import annotations

import hashlib
import json
import os
import shutil

import pygit2
import pytest
import zstandard

from git_pf import Repo
from git_pf.core.errors import CorruptObject
from git_pf.transport import index as idx
from transport_helpers import bare, origin_of, pf, sh, source_repo, tree_files

NO_SHORTCUT = {"GIT_PF_NO_LOCAL_SHORTCUT": "1"}


def _store_files(repo):
    return [p for p in (repo / ".git" / "pf" / "objects").glob("??/*")]


def _held(repo) -> set[str]:
    return set(Repo.open(repo).store.held.oids())


def _index(repo) -> dict:
    git = pygit2.Repository(str(repo))
    return idx.read_index(git, str(git.references["refs/pf/objects"].target))


def _marks(repo) -> set:
    """The re-hash marks on disk, read by docs/transport.md's spec."""
    lines = (repo / ".git" / "pf" / "rehashed").read_bytes().decode().splitlines()
    assert lines[0] == "pf-rehashed 1"
    return {(line.split()[0], tuple(line.split()[1:])) for line in lines[1:]}


def _packs(git_dir):
    return {p.name: p.stat().st_ino for p in (git_dir / "objects" / "pack").glob("*.pack")}


@pytest.mark.parametrize("shortcut", [True, False], ids=["linked", "fetched"])
def test_checkout_reads_objects_from_git_and_pf_objects_stays_empty(tmp_path, shortcut):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    env = None if shortcut else NO_SHORTCUT
    pf("push", "origin", "main", cwd=a, env=env)
    b = tmp_path / "b"
    pf("clone", f"file://{remote}", b, cwd=tmp_path, env=env)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=b, env=env)
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert _store_files(b) == []  # nothing copied into the side-store directory
    sent = {p.parent.name + p.name for p in _store_files(a)}
    assert _held(b) == sent
    shared = set(_packs(remote).items()) & set(_packs(b / ".git").items())
    assert bool(shared) == shortcut  # a local remote's pack is linked (same inode), not copied
    sh("git", "fsck", "--no-dangling", cwd=b)  # the objects index reaches every blob it lists
    assert pf("fsck", cwd=b).returncode == 0

    # git's own gc keeps them (reachable from refs/pf/objects); no remote is needed any more
    sh("git", "gc", "-q", "--prune=now", cwd=b)
    shutil.rmtree(remote)
    pf("checkout", "main", "--into", tmp_path / "c2", cwd=b)
    assert tree_files(tmp_path / "c2") == tree_files(sb)
    assert _store_files(b) == []


def test_corrupt_blob_is_refused_on_read_and_unlisted(tmp_path):
    a, _ = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a)
    repo = pygit2.Repository(str(remote))
    index = idx.read_index(repo, str(repo.references["refs/pf/objects"].target))
    victim = max(index, key=lambda o: index[o].size)
    # a sound frame (its checksum matches) of other bytes: only re-hashing catches it
    bad = str(repo.create_blob(zstandard.ZstdCompressor(write_checksum=True).compress(b"something else")))
    forged = {**index, victim: idx.Entry(10, (bad,))}
    new = idx.write_index_commit(repo, None, {}, forged, idx.write_data_commit(repo, {victim: forged[victim]}))
    repo.references["refs/pf/objects"].set_target(new)
    for env in (None, NO_SHORTCUT):
        b = tmp_path / f"b{len(str(env))}"
        pf("clone", remote, b, cwd=tmp_path, env=env)
        proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=b, env=env, check=False)
        assert proc.returncode == 3 and "corrupt" in proc.stderr and victim[:12] in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
        assert victim not in _held(b) and _store_files(b) == []  # unlisted: a later read fetches it again
        assert not (tmp_path / "c").exists()
        assert pf("fsck", cwd=b).returncode == 0


def _pushed_cloned_checked_out(tmp_path, env=None):
    """A source repo pushed to a bare origin, cloned into b and checked out into c: (sb, b)."""
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a, env=env)
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path, env=env)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=b, env=env)
    return sb, b


def test_held_objects_push_on_to_another_remote(tmp_path):
    sb, b = _pushed_cloned_checked_out(tmp_path)
    assert _held(b) and _store_files(b) == []
    for store in ("git", "file"):
        second = bare(tmp_path / f"second-{store}.git")
        sh("git", "remote", "add", store, second, cwd=b)
        sh("git", "config", f"pf.remote.{store}.store", store, cwd=b)
        pushed = json.loads(pf("push", store, "main", "--json", cwd=b, env={"GIT_PF_NO_LAZY_FETCH": "1"}).stdout)
        assert pushed["sent_objects"] == len(_held(b))
        c = tmp_path / f"c-{store}"
        pf("clone", second, c, cwd=tmp_path)
        pf("checkout", "main", "--into", tmp_path / f"out-{store}", cwd=c)
        assert tree_files(tmp_path / f"out-{store}") == tree_files(sb)


def test_git_pf_gc_unlists_held_objects_no_image_reaches(tmp_path):
    _, b = _pushed_cloned_checked_out(tmp_path)
    held = _held(b)
    assert json.loads(pf("gc", "--prune=now", "--json", cwd=b).stdout)["removed"] == []
    assert _held(b) == held  # reached from refs/pf/heads/main
    pf("branch", "copy", "main", cwd=b)
    for ref in ("refs/pf/heads/main", "refs/pf/remotes/origin/heads/main"):
        sh("git", "update-ref", "-d", ref, cwd=b)
    dry = json.loads(pf("gc", "--prune=now", "--dry-run", "--json", cwd=b).stdout)
    assert dry["removed"] == [] and _held(b) == held  # 'copy' still reaches them
    sh("git", "update-ref", "-d", "refs/pf/heads/copy", cwd=b)
    assert json.loads(pf("gc", "--json", cwd=b).stdout)["removed"] == []  # added just now: spared
    dry = json.loads(pf("gc", "--prune=now", "--dry-run", "--json", cwd=b).stdout)
    assert sorted(dry["removed"]) == sorted(held) and _held(b) == held
    assert {oid for oid, _ in _marks(b)} == held  # the checkout re-hashed them
    done = json.loads(pf("gc", "--prune=now", "--json", cwd=b).stdout)
    assert sorted(done["removed"]) == sorted(held) and _held(b) == set()
    assert _marks(b) == set()  # the marks of what is no longer held go with it
    sh("git", "gc", "-q", "--prune=now", cwd=b)
    assert pf("fsck", cwd=b).returncode == 0


def test_marks_that_do_not_read_cost_a_rehash_and_are_written_anew(tmp_path):
    _, b = _pushed_cloned_checked_out(tmp_path)
    path = b / ".git" / "pf" / "rehashed"
    good = sorted(_marks(b))
    first, rest = good[0], good[1:]
    cut = (first[0] + " " + " ".join(first[1]))[:50]  # a mark whose write was cut short
    path.write_text("pf-rehashed 1\n" + cut + "\n" + "".join(f"{o} {' '.join(bl)}\n" for o, bl in rest))
    store = Repo.open(b).store
    assert not store.held.rehashed(first) and all(store.held.rehashed(s) for s in rest)

    path.write_text("pf-rehashed 9\n" + "".join(f"{o} {' '.join(bl)}\n" for o, bl in good))  # not this format
    store = Repo.open(b).store
    assert not any(store.held.rehashed(s) for s in good)
    data = store.get(first[0])  # re-hashed, and the file written anew with its mark
    assert hashlib.sha256(data).hexdigest() == first[0]
    assert _marks(b) == {first}
    assert Repo.open(b).store.held.rehashed(first)


@pytest.mark.parametrize("shortcut", [True, False], ids=["linked", "fetched"])
def test_a_held_object_is_rehashed_once_for_every_process_and_damage_in_its_pack_is_still_caught(tmp_path, shortcut):
    env = None if shortcut else NO_SHORTCUT
    _, b = _pushed_cloned_checked_out(tmp_path, env)  # the checkout brings the objects, in another process
    store = Repo.open(b).store
    oid = max(store.held.oids(), key=store.held.size)
    frame, source = store.held.read(oid)
    frame = bytes(frame)
    assert zstandard.get_frame_parameters(frame).has_checksum
    assert store.held.rehashed(source)  # the checkout re-hashed it, and its mark outlives that process
    assert _marks(b) == {(o, tuple(e.blobs)) for o, e in _index(b).items()}
    data = store.get(oid)  # checked by the frame's checksum
    assert hashlib.sha256(data).hexdigest() == oid

    # one bit flipped in the pack where the frame lies: caught still (by the frame's checksum where
    # the pack holds it as is, as a pushed pack linked in does; by zlib where git deflated it)
    objects = b / ".git" / "objects"
    piece = frame[len(frame) // 2 : len(frame) // 2 + 64]
    hits = [(p, p.read_bytes().find(piece)) for p in objects.glob("pack/*.pack")]
    hits = [(p, at) for p, at in hits if at >= 0]
    assert bool(hits) == shortcut
    if not hits:  # a small fetch: git unpacked it into loose objects
        blob = source[1][0]
        loose = objects / blob[:2] / blob[2:]
        hits = [(loose, loose.stat().st_size // 2)]
    pack, at = hits[0]
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as f:
        f.seek(at + 10)
        byte = f.read(1)[0]
        f.seek(at + 10)
        f.write(bytes([byte ^ 0x20]))
    with pytest.raises(CorruptObject, match="checksum" if shortcut else "git object"):
        store.get(oid)
    assert oid not in _held(b)  # unlisted: the next read fetches it again
    # from the command line: one line, exit 3, nothing checked out (git keeps the damaged object, so
    # fetching the same blob again does not mend it)
    proc = pf("checkout", "main", "--into", tmp_path / "c2", cwd=b, env=env, check=False)
    assert proc.returncode == 3 and "corrupt" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "c2").exists()
