"""The lfs adapter against a real Git LFS server (giftless on 127.0.0.1), the recorded adapter,
``git pf remote-store``, and one local copy after a push through the default adapter."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time

import pytest

from lfs_helpers import credentials, giftless_server, hostile_lfs, push_with_a_corrupt_chunk
from mount_helpers import requires_fuse
from transport_helpers import (ENV, mounted_files, objects_bytes, origin_of, pf, rand_bytes, sh, source_repo,
                               tree_files)

MiB = 1024 * 1024


@pytest.fixture
def lfs(tmp_path):
    with giftless_server(tmp_path / "server") as server:
        yield server


def _lfs_repo(tmp_path, lfs, big: int = 5 * MiB):
    a, sb = source_repo(tmp_path, big)
    remote = origin_of(a, tmp_path)
    credentials(a, lfs)
    pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
    return a, sb, remote


def _side_store_bytes(repo) -> int:
    root = repo / ".git" / "pf" / "objects"
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and "tmp" not in p.parts)


def _recorded(remote) -> tuple[dict[str, int], dict[str, str]]:
    """What the remote's store record lists: ``({oid: bytes}, {bundled oid: its bundle})``."""
    sizes, bundles = {}, {}
    listing = sh("git", "ls-tree", "-r", "refs/pf/meta/store", cwd=remote).stdout.splitlines()
    for line in listing:
        meta, path = line.split("\t")
        if path.startswith(("sizes/", "bundles/")):
            for row in sh("git", "cat-file", "blob", meta.split()[2], cwd=remote).stdout.splitlines():
                fields = row.split()
                if path.startswith("sizes/"):
                    sizes[fields[0]] = int(fields[1])
                else:
                    bundles[fields[0]] = fields[1]
    return sizes, bundles


def test_push_clone_lazy_checkout_and_gc_through_lfs(tmp_path, lfs):
    a, sb, remote = _lfs_repo(tmp_path, lfs)
    git_before, store_before = objects_bytes(a / ".git"), _side_store_bytes(a)
    result = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    assert result["sent_objects"] == result["objects"] > 1
    # the image's chunks travel as one LFS object (a bundle): one PUT, not one per chunk
    stored = lfs.objects()
    assert len(lfs.uploads()) == len(stored) == 1 and sum(stored.values()) == result["sent_bytes"] >= 5 * MiB
    for oid in stored:  # stored under the sha256 of their raw bytes, as LFS defines
        assert hashlib.sha256(lfs.object_path(oid).read_bytes()).hexdigest() == oid
    sizes, bundles = _recorded(remote)
    assert len(sizes) == result["objects"] and set(bundles) == set(sizes) and set(bundles.values()) == set(stored)
    assert sum(sizes.values()) == result["sent_bytes"]  # each object carried once
    # nothing held twice locally: the side store as it was, git gained only small records
    assert _side_store_bytes(a) == store_before
    assert objects_bytes(a / ".git") - git_before < 64 * 1024
    # the remote's git repository holds the image and the record, no object data
    assert objects_bytes(remote) < MiB
    again = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    assert again["sent_objects"] == 0 and len(lfs.uploads()) == 1

    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)  # no flags: the clone pins the store the remote records
    credentials(b, lfs)
    shown = json.loads(pf("remote-store", "--json", cwd=b).stdout)
    assert shown["adapter"] == "lfs" and shown["source"] == "config" and shown["url"] == lfs.endpoint
    assert lfs.requests("GET") == []  # clone fetched no object
    pf("checkout", "main", "--into", tmp_path / "c", cwd=b)  # objects come lazily, from the lfs server
    assert tree_files(tmp_path / "c") == tree_files(sb)
    # giftless ignores Range: the ranged GET for the chunk index brought the whole bundle, and
    # its members were kept, so the chunks needed no request of their own
    assert len(lfs.requests("GET")) == 1

    gc = json.loads(pf("gc", "--prune=now", "--json", cwd=b).stdout)
    assert gc["removed"] == [] and gc["kept"] == result["objects"]
    pf("checkout", "main", "--into", tmp_path / "d", cwd=b, env={"GIT_PF_NO_LAZY_FETCH": "1"})
    assert tree_files(tmp_path / "d") == tree_files(sb)
    assert pf("fsck", cwd=b).returncode == 0 and pf("fsck", cwd=a).returncode == 0


@requires_fuse
def test_a_clone_mounts_an_image_whose_objects_come_lazily_from_the_lfs_server(tmp_path, lfs):
    a, sb, remote = _lfs_repo(tmp_path, lfs)
    pushed = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    credentials(b, lfs)
    assert lfs.requests("GET") == []
    assert mounted_files(b, "main", tmp_path / "mnt") == tree_files(sb)
    assert 0 < len(lfs.requests("GET")) <= pushed["objects"]  # each object fetched at most once


def test_a_push_killed_half_way_completes_on_rerun_without_uploading_twice(tmp_path, lfs):
    a, sb, remote = _lfs_repo(tmp_path, lfs, big=24 * MiB)
    sh("git", "config", "lfs.concurrenttransfers", "1", cwd=a)
    sh("git", "config", "pf.lfs.bundleSize", "2m", cwd=a)  # bundles of 1 to 4 MiB: about ten
    for record in (a / ".git" / "pf" / "objects" / "hashed").iterdir():
        record.unlink()  # without the snapshot's hash the file goes in bundles, not as one object
    proc = subprocess.Popen(["git-pf", "push", "origin", "main"], cwd=a, env=ENV, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    end = time.time() + 60
    while time.time() < end and len(lfs.uploads()) < 3:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    refs = sh("git", "for-each-ref", "--format=%(refname)", cwd=remote).stdout.split()
    assert "refs/pf/heads/main" not in refs
    first = set(lfs.uploads())
    assert first
    result = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    accepted = lfs.uploads()
    assert 0 < result["sent_bytes"] < sum(lfs.objects().values())  # the rerun sent only what was missing
    assert len(accepted) == len(set(accepted)) > len(first)  # no object the server took was sent again
    assert set(lfs.objects()) == set(accepted)
    for oid in accepted:
        assert hashlib.sha256(lfs.object_path(oid).read_bytes()).hexdigest() == oid
    # the rerun cut the same bundles: no side-store object is on the server twice
    sizes, bundles = _recorded(remote)
    assert len(sizes) == result["objects"] and sum(sizes.values()) == sum(lfs.objects().values())
    assert set(bundles.values()) | (set(sizes) - set(bundles)) == set(accepted)
    pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    credentials(tmp_path / "b", lfs)
    pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b")
    assert tree_files(tmp_path / "c") == tree_files(sb)


def test_a_corrupt_local_chunk_is_refused_and_nothing_of_its_bundle_is_pushed(tmp_path, lfs):
    """The push reads each member of a bundle once, hashing the bundle as it goes: a member whose
    stored frame no longer matches its checksum stops the push before the bundle is offered."""
    a, _, remote = _lfs_repo(tmp_path, lfs)
    push_with_a_corrupt_chunk(a, remote)
    assert lfs.uploads() == [] and lfs.objects() == {}


def test_a_corrupt_object_on_the_server_is_refused_and_not_stored(tmp_path, lfs):
    a, _, remote = _lfs_repo(tmp_path, lfs)
    pf("push", "origin", "main", cwd=a)
    victim = max(lfs.objects(), key=lambda o: lfs.objects()[o])
    path = lfs.object_path(victim)
    path.write_bytes(rand_bytes(path.stat().st_size, 99))  # same size, other bytes
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    credentials(b, lfs)
    proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=b, check=False)
    assert proc.returncode == 3
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and victim in lines[0] and "corrupt" in lines[0] and "Traceback" not in proc.stderr
    assert _side_store_bytes(b) == 0  # nothing of the corrupt bundle was stored


def test_a_login_that_works_is_approved_to_gits_helpers_before_the_push_ends(tmp_path, lfs):
    a, _, _ = _lfs_repo(tmp_path, lfs, big=MiB)
    approved = tmp_path / "approved"
    sh("git", "config", "--add", "credential.helper", f'!f() {{ [ "$1" = store ] && cat >> {approved}; true; }}; f',
       cwd=a)
    pf("push", "origin", "main", cwd=a)
    lines = approved.read_text().splitlines()
    assert "username=pf" in lines and "password=secret" in lines and f"host=127.0.0.1:{lfs.port}" in lines


def test_wrong_credentials_give_one_line_and_push_nothing(tmp_path, lfs):
    a, _, remote = _lfs_repo(tmp_path, lfs)
    credentials(a, lfs, password="not-the-password")
    proc = pf("push", "origin", "main", cwd=a, check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == ("git pf: error: the lfs server at 127.0.0.1 refused the credentials "
                                   "of 'pf' (HTTP 401)")
    assert lfs.uploads() == [] and sh("git", "for-each-ref", cwd=remote).stdout == ""


@pytest.mark.parametrize("fault, says", [("refuse", "refused object"), ("batch-500", "answered HTTP 500"),
                                         ("bad-header", "sent a header or URL that is not valid in HTTP")])
def test_a_hostile_lfs_server_gets_one_clean_line_and_nothing_is_pushed(tmp_path, fault, says):
    a, _ = source_repo(tmp_path, MiB)
    remote = origin_of(a, tmp_path)
    with hostile_lfs() as lfs:
        lfs.faults.add(fault)
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        proc = pf("push", "origin", "main", cwd=a, check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    line = proc.stderr.rstrip("\n")
    assert "\n" not in line and says in line and len(line) < 400
    assert not any(ord(c) < 0x20 or 0x7f <= ord(c) <= 0x9f for c in line)  # no terminal escapes from the server
    if fault != "bad-header":
        assert "denied [2J forged: line" in line  # the server's text, on one line, without its escapes
    assert lfs.objects == {} and sh("git", "for-each-ref", cwd=remote).stdout == ""


def test_a_download_that_breaks_half_way_is_tried_again_from_its_first_byte(tmp_path):
    a, sb = source_repo(tmp_path, 3 * MiB)
    remote = origin_of(a, tmp_path)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        pushed = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
        assert pushed["sent_bytes"] == sum(map(len, lfs.objects.values())) >= 3 * MiB
        pf("clone", remote, tmp_path / "b", cwd=tmp_path)
        lfs.faults.add("drop")
        pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b")
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert set(lfs.gets) == set(lfs.objects)
    for oid in lfs.objects:  # each object's first GET broke, and was asked again for the same bytes
        first = lfs.gets.index(oid)
        assert lfs.gets[first + 1] == oid and lfs.ranges[first + 1] == lfs.ranges[first]
    assert pf("fsck", cwd=tmp_path / "b").returncode == 0


def test_a_hostile_store_record_is_one_warning_line_and_is_not_used(tmp_path):
    remote = sh("git", "init", "-q", "--bare", tmp_path / "r.git") and tmp_path / "r.git"
    blob = sh("git", "hash-object", "-w", "--stdin", cwd=remote,
              input='{"adapter": "lfs", "url": "http://user:pw@evil.example/x"}\n').stdout.strip()
    tree = sh("git", "mktree", cwd=remote, input=f"100644 blob {blob}\tstore.json\n").stdout.strip()
    commit = sh("git", "commit-tree", tree, "-m", "record", cwd=remote).stdout.strip()
    sh("git", "update-ref", "refs/pf/meta/store", commit, cwd=remote)
    for proc in (pf("clone", remote, tmp_path / "b", cwd=tmp_path, check=False),
                 pf("remote-store", cwd=tmp_path / "b", check=False)):
        assert proc.returncode == 0 and len(proc.stderr.strip().splitlines()) == 1
        assert "not a valid store record" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == "origin: git (default)\n"  # nothing pinned from it


def test_remote_store_shows_sets_and_refuses(tmp_path):
    a, _ = source_repo(tmp_path, 1024)
    origin_of(a, tmp_path)
    assert pf("remote-store", cwd=a).stdout == "origin: git (default)\n"
    pf("remote-store", "origin", "s3://bucket-1/images/a", cwd=a)
    assert sh("git", "config", "pf.remote.origin.store", cwd=a).stdout == "s3://bucket-1/images/a\n"
    assert json.loads(pf("remote-store", "--json", cwd=a).stdout)["source"] == "config"
    for bad in ("ftp", "lfs:file:///x", "s3://UPPER/x"):
        proc = pf("remote-store", "origin", bad, cwd=a, check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, bad
    assert sh("git", "config", "pf.remote.origin.store", cwd=a).stdout == "s3://bucket-1/images/a\n"
    pf("remote-store", "origin", "lfs", cwd=a)  # lfs without an endpoint: a local remote
    proc = pf("push", "origin", "main", cwd=a, check=False)
    assert proc.returncode == 2 and "has no Git LFS endpoint" in proc.stderr


def test_endpoints_are_derived_as_git_lfs_does():
    from git_pf.transport.lfsauth import derive

    assert derive("https://host.example/team/repo") == "https://host.example/team/repo.git/info/lfs"
    assert derive("https://host.example/team/repo.git/") == "https://host.example/team/repo.git/info/lfs"
    assert derive("ssh://git@host.example:2222/team/repo.git") == "https://host.example/team/repo.git/info/lfs"
    assert derive("git@host.example:team/repo.git") == "https://host.example/team/repo.git/info/lfs"
    assert derive("/srv/repo.git") is None and derive("file:///srv/repo.git") is None


def test_a_push_through_git_leaves_one_local_copy(tmp_path):
    """The invariant of docs/transport.md: after a push through the default adapter the side
    store holds each object once and the git packs hold no second full copy."""
    a, _ = source_repo(tmp_path, 8 * MiB)
    origin_of(a, tmp_path)
    before = objects_bytes(a / ".git")
    store = _side_store_bytes(a)
    result = json.loads(pf("push", "origin", "main", "--json", cwd=a, env={"GIT_PF_NO_LOCAL_SHORTCUT": "1"}).stdout)
    assert result["sent_bytes"] >= 8 * MiB
    assert _side_store_bytes(a) == store
    assert objects_bytes(a / ".git") - before < result["sent_bytes"] // 10


def _two_file_repo(tmp_path, small: int, large: int):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "small.bin").write_bytes(rand_bytes(small, 5))
    (sb / "large.bin").write_bytes(rand_bytes(large, 6))
    pf("init", tmp_path / "a", cwd=tmp_path)
    pf("snapshot", "--fs-root", sb, "-m", "two files", cwd=tmp_path / "a")
    return tmp_path / "a", sb, origin_of(tmp_path / "a", tmp_path)


@requires_fuse
def test_a_lazy_read_asks_a_server_for_only_the_part_of_a_bundle_it_needs(tmp_path):
    a, sb, remote = _two_file_repo(tmp_path, 2 * MiB, 8 * MiB)
    sh("git", "config", "pf.lfs.bundleSize", "32m", cwd=a)  # both files in one bundle
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        pf("push", "origin", "main", cwd=a)
        assert len(lfs.objects) == 1 and len(next(iter(lfs.objects.values()))) >= 10 * MiB
        b = tmp_path / "b"
        pf("clone", remote, b, cwd=tmp_path)
        mnt = tmp_path / "mnt"
        mnt.mkdir()
        pf("mount", "main", mnt, cwd=b)
        try:
            assert (mnt / "small.bin").read_bytes() == (sb / "small.bin").read_bytes()
        finally:
            pf("umount", mnt, cwd=b, check=False)
        assert lfs.gets and all(r is not None for r in lfs.ranges)  # byte ranges of the bundle, never all of it
        assert 2 * MiB <= lfs.sent < 3 * MiB
        pf("checkout", "main", "--into", tmp_path / "c", cwd=b)  # the rest comes when it is needed
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert pf("fsck", cwd=b).returncode == 0


def test_a_server_that_sends_other_bytes_than_the_range_asked_is_one_line_and_nothing_is_stored(tmp_path):
    a, sb, remote = _two_file_repo(tmp_path, 2 * MiB, 8 * MiB)
    sh("git", "config", "pf.lfs.bundleSize", "32m", cwd=a)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        pf("push", "origin", "main", cwd=a)
        b = tmp_path / "b"
        pf("clone", remote, b, cwd=tmp_path)
        lfs.faults.add("wrong-range")
        proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=b, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "it was not asked for" in proc.stderr
    assert _side_store_bytes(b) == 0 and not (tmp_path / "c").exists()


def test_a_store_record_whose_bundles_do_not_add_up_is_refused(tmp_path):
    a, _, remote = _two_file_repo(tmp_path, MiB, 3 * MiB)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        pf("push", "origin", "main", cwd=a)
        # a record that says one object lies past the end of its bundle
        listing = sh("git", "ls-tree", "-r", "refs/pf/meta/store", cwd=remote).stdout.splitlines()
        rows = []
        for line in listing:
            meta, path = line.split("\t")
            blob = meta.split()[2]
            if path.startswith("bundles/") and not rows:
                text = sh("git", "cat-file", "blob", blob, cwd=remote).stdout.splitlines()
                oid, bundle, size, _ = text[0].split()
                text[0] = f"{oid} {bundle} {size} {size}"
                blob = sh("git", "hash-object", "-w", "--stdin", cwd=remote, input="\n".join(text) + "\n").stdout.strip()
                rows.append(path)
            sh("git", "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", cwd=remote,
               env={"GIT_INDEX_FILE": str(tmp_path / "index")})
        assert rows
        tree = sh("git", "write-tree", cwd=remote, env={"GIT_INDEX_FILE": str(tmp_path / "index")}).stdout.strip()
        commit = sh("git", "commit-tree", tree, "-m", "record", cwd=remote).stdout.strip()
        sh("git", "update-ref", "refs/pf/meta/store", commit, cwd=remote)
        b = tmp_path / "b"
        proc = pf("clone", remote, b, cwd=tmp_path, check=False)  # the clone reads the record: a warning
        assert proc.returncode == 0 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "does not fit its bundle" in proc.stderr
        # its listings are not used: no object is asked for by a range the record made up
        checkout = pf("checkout", "main", "--into", tmp_path / "c", cwd=b, check=False)
    assert checkout.returncode != 0 and len(checkout.stderr.strip().splitlines()) == 1
    assert lfs.gets == [] and _side_store_bytes(b) == 0


def _remote_ref(remote, ref: str) -> str | None:
    proc = sh("git", "rev-parse", "-q", "--verify", ref, cwd=remote, check=False)
    return proc.stdout.strip() or None


def test_a_refused_image_push_moves_neither_the_image_nor_the_store_record(tmp_path):
    """The store record goes in the images' own push, all or nothing: a diverged branch (never
    forced) is refused in one line, and the remote keeps both its branch and its record."""
    a, sb, remote = _two_file_repo(tmp_path, MiB, 2 * MiB)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        first = sh("git", "rev-parse", "refs/pf/heads/main", cwd=a).stdout.strip()
        (sb / "small.bin").write_bytes(rand_bytes(MiB, 8))
        pf("snapshot", "--fs-root", sb, "-m", "second", cwd=a)
        pf("push", "origin", "main", cwd=a)
        tip, record = _remote_ref(remote, "refs/pf/heads/main"), _remote_ref(remote, "refs/pf/meta/store")
        sh("git", "update-ref", "refs/pf/heads/main", first, cwd=a)  # a diverging line, with new objects
        (sb / "new.bin").write_bytes(rand_bytes(MiB, 7))
        pf("snapshot", "--fs-root", sb, "-m", "diverged", cwd=a)
        proc = pf("push", "origin", "main", cwd=a, check=False)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "git push to 'origin' failed" in proc.stderr
        assert _remote_ref(remote, "refs/pf/heads/main") == tip
        assert _remote_ref(remote, "refs/pf/meta/store") == record
        forced = pf("push", "-f", "origin", "main", cwd=a)  # forced when asked: both move
        assert forced.returncode == 0
        assert _remote_ref(remote, "refs/pf/heads/main") == sh("git", "rev-parse", "refs/pf/heads/main",
                                                                cwd=a).stdout.strip()
        assert _remote_ref(remote, "refs/pf/meta/store") != record


def test_a_server_without_atomic_pushes_gets_the_record_before_the_images(tmp_path):
    a, _, remote = _two_file_repo(tmp_path, MiB, 2 * MiB)
    sh("git", "config", "receive.advertiseAtomic", "false", cwd=remote)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        out = json.loads(pf("push", "--json", "origin", "main", cwd=a).stdout)
    assert _remote_ref(remote, "refs/pf/heads/main") == sh("git", "rev-parse", "refs/pf/heads/main",
                                                            cwd=a).stdout.strip()
    sizes, _ = _recorded(remote)
    assert len(sizes) == out["objects"] == out["sent_objects"]


def test_a_store_record_moved_by_another_push_meanwhile_is_merged_not_overwritten(tmp_path):
    """The push starts from the record it read first; when another push moved it before this
    one's record lands (here: a pre-receive hook moves it, as a push that won the race), the
    lease refuses, and the record is read again, merged and pushed with the images."""
    for d in ("c", "a"):
        (tmp_path / d).mkdir()
    c, _, remote = _two_file_repo(tmp_path / "c", MiB, 2 * MiB)
    a, _ = source_repo(tmp_path / "a", 3 * MiB)
    sh("git", "remote", "add", "origin", remote, cwd=a)
    with hostile_lfs() as lfs:
        for repo in (c, a):
            pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=repo)
        pf("push", "origin", "main", cwd=c)
        theirs, _ = _recorded(remote)
        sh("git", "update-ref", "refs/saved/store", "refs/pf/meta/store", cwd=remote)
        for ref in ("refs/pf/meta/store", "refs/pf/heads/main"):
            sh("git", "update-ref", "-d", ref, cwd=remote)
        hook = remote / "hooks" / "pre-receive"
        hook.write_text("#!/bin/sh\ncat >/dev/null\n"
                        "if git rev-parse -q --verify refs/saved/store >/dev/null; then\n"
                        "  unset GIT_QUARANTINE_PATH GIT_OBJECT_DIRECTORY GIT_ALTERNATE_OBJECT_DIRECTORIES\n"
                        "  git update-ref refs/pf/meta/store refs/saved/store && git update-ref -d refs/saved/store\n"
                        "fi\n")
        hook.chmod(0o755)
        out = json.loads(pf("push", "--json", "origin", "main", cwd=a).stdout)
    assert _remote_ref(remote, "refs/saved/store") is None  # the race did happen
    ours, _ = _recorded(remote)
    assert set(theirs) < set(ours) and len(set(ours) - set(theirs)) == out["sent_objects"] > 0
    assert _remote_ref(remote, "refs/pf/heads/main") == sh("git", "rev-parse", "refs/pf/heads/main",
                                                            cwd=a).stdout.strip()
