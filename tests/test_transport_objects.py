"""Side-store objects over remotes: dedup measured at the remote, batch limits, the file adapter,
and faults (killed push, missing object, corrupt object)."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pygit2

from transport_helpers import ENV, bare, objects_bytes, origin_of, pf, rand_bytes, sh, source_repo, tree_files

MiB = 1024 * 1024


def _world(root, files: int, seed: int = 7):
    root.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (root / f"f{i:02d}.bin").write_bytes(rand_bytes(MiB, seed * 1000 + i))


def test_fork_changing_1mb_of_a_200mb_world_sends_under_3mb(tmp_path):
    """The issue's case: X is a 200 MiB world (25 files of 8 MiB); its fork overwrites 1 MiB
    in the middle of one file, so content-defined chunks on both sides of the edit change too."""
    sb = tmp_path / "sb"
    sb.mkdir()
    for i in range(25):
        (sb / f"part{i:02d}.bin").write_bytes(rand_bytes(8 * MiB, 7000 + i))
    a = tmp_path / "a"
    pf("init", a, cwd=tmp_path)
    pf("snapshot", "--fs-root", sb, "-m", "X", cwd=a)
    remote = origin_of(a, tmp_path)
    before = objects_bytes(remote)
    pf("push", "origin", "main", cwd=a)
    first = objects_bytes(remote) - before
    assert first >= 200 * MiB
    with open(sb / "part17.bin", "r+b") as f:  # the fork changes 1 MiB in place
        f.seek(4 * MiB - 12345)
        f.write(rand_bytes(MiB, 99))
    pf("snapshot", "--fs-root", sb, "--name", "fork", "-m", "fork of X", cwd=a)
    before = objects_bytes(remote)
    out = pf("push", "origin", "fork", "--json", cwd=a).stdout
    sent = objects_bytes(remote) - before
    assert MiB <= sent <= 3 * MiB, (sent, out)


def test_pushes_are_split_by_max_push_bytes(tmp_path):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    sh("git", "config", "pf.maxPushBytes", "2m", cwd=a)
    pf("push", "origin", "main", cwd=a)
    repo = pygit2.Repository(str(remote))
    index_commits = [c for c in sh("git", "rev-list", "--first-parent", "refs/pf/objects", cwd=remote).stdout.split()
                     if "version" in repo[c].tree]
    assert len(index_commits) >= 3
    for c in index_commits:  # every data commit holds at most 2 MiB of frames
        data = repo[c].parents[-1]
        sizes = [repo[e.id].size for t in data.tree for e in repo[t.id]]
        assert sum(sizes) <= 2 * MiB
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b")
    assert tree_files(tmp_path / "c") == tree_files(sb)


def test_file_adapter_stores_objects_in_the_bare_repo(tmp_path):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    sh("git", "config", "pf.remote.origin.store", "file", cwd=a)
    pf("push", "origin", "main", cwd=a)
    refs = sh("git", "for-each-ref", "--format=%(refname)", cwd=remote).stdout.split()
    assert refs == ["refs/pf/heads/main"]
    stored = [p for p in (remote / "pf" / "objects").rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in stored) >= 5 * MiB
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    b = tmp_path / "b"
    assert sh("git", "config", "pf.remote.origin.store", cwd=b).stdout.strip() == "file"
    pf("checkout", "main", "--into", tmp_path / "c", cwd=b)
    assert tree_files(tmp_path / "c") == tree_files(sb)
    # a corrupt frame on the remote is refused and never enters the local store
    victim = max(stored, key=lambda p: p.stat().st_size)
    oid = victim.parent.name + victim.name
    os.chmod(victim, 0o644)
    victim.write_bytes(victim.read_bytes()[:-10] + b"0123456789")
    pf("clone", remote, tmp_path / "b2", cwd=tmp_path)
    proc = pf("checkout", "main", "--into", tmp_path / "c2", cwd=tmp_path / "b2", check=False)
    assert proc.returncode == 3 and "corrupt" in proc.stderr and oid[:12] in proc.stderr, proc.stderr
    assert not (tmp_path / "b2" / ".git" / "pf" / "objects" / oid[:2] / oid[2:]).exists()
    assert not (tmp_path / "c2").exists()


def test_corrupt_object_from_a_git_remote_is_rejected(tmp_path):
    from git_pf.transport import index as idx

    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a)
    # the remote's index now maps one object to a blob with other content
    repo = pygit2.Repository(str(remote))
    tip = str(repo.references["refs/pf/objects"].target)
    index = idx.read_index(repo, tip)
    victim = max(index, key=lambda o: index[o].size)
    import zstandard
    bad = repo.create_blob(zstandard.ZstdCompressor().compress(b"not what you asked for"))
    data = idx.write_data_commit(repo, {victim: idx.Entry(10, (str(bad),))})
    forged = {**index, victim: idx.Entry(10, (str(bad),))}
    new = idx.write_index_commit(repo, None, {}, forged, data)
    repo.references["refs/pf/objects"].set_target(new)

    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", check=False)
    assert proc.returncode == 3 and "corrupt" in proc.stderr and victim[:12] in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b" / ".git" / "pf" / "objects" / victim[:2] / victim[2:]).exists()


def test_remote_lacking_an_object_names_image_path_and_oid(tmp_path):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    sh("git", "push", "-q", "origin", "refs/pf/heads/main:refs/pf/heads/main", cwd=a)  # refs only
    image = pf("show", "main", "--json", cwd=a).stdout.split('"id": "')[1][:12]
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", check=False)
    line = proc.stderr.strip()
    assert proc.returncode == 3 and len(line.splitlines()) == 1, proc.stderr
    assert image in line and "big.bin" in line and "missing" in line
    assert any(len(w) == 64 for w in line.replace("'", " ").split())
    # pushing from a repository that lacks the object names the same things
    pf("branch", "copy", "main", cwd=tmp_path / "b")
    proc = pf("push", "origin", "copy", cwd=tmp_path / "b", check=False)
    assert proc.returncode == 3 and image in proc.stderr and "big.bin" in proc.stderr, proc.stderr


def test_push_killed_half_way_then_rerun_completes(tmp_path):
    sb = tmp_path / "sb"
    _world(sb, 24)
    a = tmp_path / "a"
    pf("init", a, cwd=tmp_path)
    pf("snapshot", "--fs-root", sb, "-m", "X", cwd=a)
    remote = origin_of(a, tmp_path)
    sh("git", "config", "pf.maxPushBytes", "2m", cwd=a)
    proc = subprocess.Popen(["git-pf", "push", "origin", "main"], cwd=a, env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 60
    while time.time() < end and not (remote / "refs" / "pf" / "objects").exists():
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    refs = sh("git", "for-each-ref", "--format=%(refname)", cwd=remote).stdout.split()
    assert "refs/pf/objects" in refs and "refs/pf/heads/main" not in refs  # killed between batches
    sh("git", "fsck", "--no-dangling", cwd=remote)
    out = pf("push", "origin", "main", "--json", cwd=a).stdout
    import json
    result = json.loads(out)
    assert 0 < result["sent_objects"] < result["objects"]  # the rerun sent only what was missing
    sh("git", "fsck", "--no-dangling", cwd=remote)
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b")
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert pf("fsck", cwd=tmp_path / "b").returncode == 0


def test_racing_pushers_both_land_in_the_objects_index(tmp_path, monkeypatch):
    from git_pf import Repo
    from git_pf.transport import index as idx, remotes
    from git_pf.transport.adapters.git import GitAdapter
    from git_pf.transport.progress import Progress

    remote = bare(tmp_path / "r.git")
    a, _ = source_repo(tmp_path)
    b = tmp_path / "b"
    pf("init", b, cwd=tmp_path)
    sb2 = tmp_path / "sb2"
    sb2.mkdir()
    (sb2 / "other.bin").write_bytes(rand_bytes(3 * MiB, 5))
    pf("snapshot", "--fs-root", sb2, "-m", "B", cwd=b)
    for repo in (a, b):
        sh("git", "remote", "add", "origin", remote, cwd=repo)
    monkeypatch.setenv("GIT_PF_NO_LOCAL_SHORTCUT", "1")  # B goes through git push, as to any remote
    rb = Repo.open(b)
    adapter = GitAdapter(rb, remotes.resolve(rb, "origin"))
    assert adapter.direct is None
    adapter.refresh()  # B learns the (empty) remote index...
    pf("push", "origin", "main", cwd=a)  # ...then A pushes first
    mine = [o for o in rb.store.iter_oids()]
    adapter.upload(rb.store, mine, Progress(True))  # B's first attempt is not a fast-forward
    final = idx.read_index(pygit2.Repository(str(remote)),
                           sh("git", "rev-parse", "refs/pf/objects", cwd=remote).stdout.strip())
    a_objects = {p.parent.name + p.name for p in (a / ".git" / "pf" / "objects").glob("??/*")}
    assert a_objects <= set(final) and set(mine) <= set(final)


def test_checkout_fetches_only_the_objects_that_image_needs(tmp_path):
    a, sb = source_repo(tmp_path)
    sb2 = tmp_path / "sb2"
    sb2.mkdir()
    (sb2 / "other.bin").write_bytes(rand_bytes(3 * MiB, 5))
    pf("snapshot", "--fs-root", sb2, "--name", "other", "-m", "other", cwd=a)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "--all", cwd=a)
    pf("clone", f"file://{remote}", tmp_path / "b", cwd=tmp_path)
    b = tmp_path / "b"
    pf("checkout", "main", "--into", tmp_path / "c", cwd=b)
    from git_pf import Repo
    from git_pf.transport import reach

    local = set(Repo.open(b).store.iter_oids())  # held as git blobs, listed by b's refs/pf/objects
    a_repo = pygit2.Repository(str(a))

    ra = Repo.open(a)
    main_objects = set(reach.objects_of(ra.store, reach.reach(a_repo, [str(a_repo.references["refs/pf/heads/main"].target)])))
    other_objects = set(reach.objects_of(ra.store, reach.reach(a_repo, [str(a_repo.references["refs/pf/heads/other"].target)])))
    assert local == main_objects and not (local & other_objects)
    # the objects index came without its data history, and the clone is not shallow
    assert not (b / ".git" / "shallow").exists()
    remote_tip = pygit2.Repository(str(remote)).references["refs/pf/objects"].peel(pygit2.Commit)
    b_git = pygit2.Repository(str(b))
    assert str(remote_tip.id) in b_git.odb and not any(p in b_git.odb for p in remote_tip.parent_ids)


def test_an_object_over_64_mib_travels_as_parts(tmp_path, monkeypatch):
    from git_pf import Repo
    from git_pf.transport import index as idx, remotes
    from git_pf.transport.adapters.git import GitAdapter
    from git_pf.transport.progress import Progress

    monkeypatch.setenv("GIT_PF_NO_LOCAL_SHORTCUT", "1")
    remote = bare(tmp_path / "r.git")
    ra, _ = Repo.init(tmp_path / "a")
    rb, _ = Repo.init(tmp_path / "b")
    for r in (ra, rb):
        sh("git", "remote", "add", "origin", remote, cwd=r.git.workdir)
    data = rand_bytes(65 * MiB, 3)
    oid = ra.store.put(data)  # one object, not chunked (as a layer may store a big tensor)
    GitAdapter(ra, remotes.resolve(ra, "origin")).upload(ra.store, [oid], Progress(True))
    git = pygit2.Repository(str(remote))
    entry = idx.read_index(git, str(git.references["refs/pf/objects"].target))[oid]
    assert len(entry.blobs) == 2 and all(git[b].size <= idx.MAX_BLOB for b in entry.blobs)
    GitAdapter(rb, remotes.resolve(rb, "origin")).download(rb.store, [oid], Progress(True))
    assert rb.store.get(oid) == data
