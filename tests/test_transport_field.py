"""Field fixes in transport: a push never makes the repository shallow, pushes to every server
kind work in any order, the pushing repository keeps one copy of each object, a failed transfer
exits 1, and a plain `git push` works in a repository that holds only images."""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pygit2

from transport_helpers import objects_bytes, pf, rand_bytes, remote_of, sh, tree_files

MiB = 1024 * 1024
NO_SHORTCUT = {"GIT_PF_NO_LOCAL_SHORTCUT": "1"}  # path remotes go through git too, as any remote


def _snapshot(repo: Path, sandbox: Path, n: int) -> None:
    (sandbox / f"big{n}.bin").write_bytes(rand_bytes(2 * MiB, 100 + n))
    pf("snapshot", "--fs-root", sandbox, "-m", f"step {n}", cwd=repo, env=NO_SHORTCUT)


def test_pushes_to_every_server_kind_in_any_order_never_make_the_repository_shallow(tmp_path):
    a, sb = tmp_path / "a", tmp_path / "sb"
    sb.mkdir()
    pf("init", a, cwd=tmp_path)
    kinds = ["path", "dulwich", "daemon", "http-backend", "file"]
    from contextlib import ExitStack

    with ExitStack() as stack:
        urls = {}
        for kind in kinds:
            sub = tmp_path / kind
            sub.mkdir()
            urls[kind] = stack.enter_context(remote_of(kind, sub))[0]
        # each server in turn, then each again in the reverse order, with a new image before each push
        for n, kind in enumerate(kinds + kinds[::-1]):
            _snapshot(a, sb, n)
            proc = pf("push", urls[kind], "main", cwd=a, env=NO_SHORTCUT, check=False)
            assert proc.returncode == 0, (kind, proc.stderr)
            assert not (a / ".git" / "shallow").exists(), kind
        for kind in kinds:  # bring every remote up to the last image
            pf("push", urls[kind], "main", cwd=a, env=NO_SHORTCUT)
        for kind in kinds:
            b = tmp_path / f"clone-{kind}"
            pf("clone", urls[kind], b, cwd=tmp_path, env=NO_SHORTCUT)
            pf("checkout", "main", "--into", tmp_path / f"out-{kind}", cwd=b, env=NO_SHORTCUT)
            assert tree_files(tmp_path / f"out-{kind}") == tree_files(sb), kind
            assert not (b / ".git" / "shallow").exists(), kind
    for repo in [a] + [tmp_path / f"clone-{k}" for k in kinds]:
        proc = sh("git", "fsck", "--full", "--strict", "--no-dangling", cwd=repo, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert sh("git", "gc", "-q", cwd=repo, check=False).returncode == 0


def test_after_a_push_the_repository_holds_each_object_once(tmp_path):
    a, sb = tmp_path / "a", tmp_path / "sb"
    sb.mkdir()
    pf("init", a, cwd=tmp_path)
    (sb / "big.bin").write_bytes(rand_bytes(20 * MiB, 7))
    pf("snapshot", "--fs-root", sb, "-m", "big", cwd=a)
    with remote_of("daemon", tmp_path) as (url, bare):
        before = objects_bytes(a / ".git")
        pf("push", url, "main", cwd=a)
        assert objects_bytes(bare) > 20 * MiB  # the remote got the data...
        # ...and the pusher's git packs got none of it: its one copy stays in the side store
        assert objects_bytes(a / ".git") - before < MiB
        assert not [p for p in (a / ".git" / "pf").iterdir() if p.name.startswith("transfer-")]


def test_a_killed_transfer_leaves_a_scratch_repository_that_the_next_one_removes(tmp_path):
    a, sb = tmp_path / "a", tmp_path / "sb"
    sb.mkdir()
    pf("init", a, cwd=tmp_path)
    _snapshot(a, sb, 0)
    dead = a / ".git" / "pf" / "transfer-999999999-x"  # no such process
    (dead / "objects" / "pack").mkdir(parents=True)
    (dead / "objects" / "pack" / "junk.pack").write_bytes(b"x" * 1000)
    with remote_of("daemon", tmp_path) as (url, _):
        pf("push", url, "main", cwd=a)
    assert not dead.exists()



def test_a_scratch_repository_whose_pid_was_reused_by_a_later_process_is_removed(tmp_path):
    """The pid in a scratch's name now names a process started after the scratch was made (its
    writer was killed and the pid reused): the next transfer removes it; a live writer's stays."""
    from git_pf.transport import scratch

    git_dir = tmp_path / "r.git"
    sh("git", "init", "-q", "--bare", git_dir)
    live = subprocess.Popen(["sleep", "60"])
    try:
        reused = git_dir / "pf" / f"transfer-{live.pid}-old"
        (reused / "objects").mkdir(parents=True)
        an_hour_ago = time.time() - 3600
        os.utime(reused, (an_hour_ago, an_hour_ago))  # made before that process started
        running = git_dir / "pf" / f"transfer-{live.pid}-new"  # made while it runs: may be its own
        running.mkdir()
        with scratch.repository(pygit2.Repository(str(git_dir))) as (path, _):
            assert path.is_dir()
        assert not reused.exists() and running.is_dir()
    finally:
        live.kill()
        live.wait()


def test_a_failed_transfer_exits_1_not_2(tmp_path):
    a, sb = tmp_path / "a", tmp_path / "sb"
    sb.mkdir()
    pf("init", a, cwd=tmp_path)
    _snapshot(a, sb, 0)
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for args in (["push", f"http://127.0.0.1:{port}/r.git", "main"], ["fetch", f"git://127.0.0.1:{port}/r.git"]):
        proc = pf(*args, cwd=a, check=False)
        assert proc.returncode == 1, (args, proc.returncode, proc.stderr)
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_plain_git_push_works_in_a_repository_that_holds_only_images(tmp_path):
    a, sb = tmp_path / "a", tmp_path / "sb"
    sb.mkdir()
    pf("init", a, cwd=tmp_path)
    _snapshot(a, sb, 0)
    with remote_of("path", tmp_path) as (url, bare):
        sh("git", "remote", "add", "origin", url, cwd=a)
        pf("install", cwd=a)
        assert pygit2.Repository(str(a)).head_is_unborn
        proc = sh("git", "push", cwd=a, check=False)
        assert proc.returncode == 0, proc.stderr
        assert "refs/pf/heads/main" in sh("git", "for-each-ref", "--format=%(refname)", cwd=bare).stdout
        # after a first commit, installing again adds HEAD, and a plain push sends the branch too
        (a / "README").write_text("hi\n")
        sh("git", "add", "README", cwd=a)
        sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "first", cwd=a)
        pf("install", cwd=a)
        assert "HEAD" in sh("git", "config", "--get-all", "remote.origin.push", cwd=a).stdout.split()
        assert sh("git", "push", cwd=a, check=False).returncode == 0
        branch = sh("git", "symbolic-ref", "--short", "HEAD", cwd=a).stdout.strip()
        assert f"refs/heads/{branch}" in sh("git", "for-each-ref", "--format=%(refname)", cwd=bare).stdout
    assert os.path.exists(a / ".git" / "pf" / "install.json")
