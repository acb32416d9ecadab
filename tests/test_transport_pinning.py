"""What a remote says never moves a local ref nor where objects go: the object store is pinned
in local config (a store record pushed by someone else is reported, not used), plain http is
refused, a malformed record is a warning, and a fetched tag never replaces a local one."""
from __future__ import annotations

import json
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from lfs_helpers import hostile_lfs
from transport_helpers import _serving, origin_of, pf, sh, source_repo

KiB = 1024
MiB = 1024 * KiB  # over pf.largeFileThreshold: such a file goes to the side store


@contextmanager
def trap():
    """An http server that takes note of every request it gets (and serves none): the attacker's."""
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _note(self):
            seen.append(f"{self.command} {self.path}")
            self.send_response(500)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = do_PUT = do_HEAD = _note

    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), Handler)) as base:
        yield base + "/team/images.git/info/lfs", seen


def _write_record(remote, text: str) -> None:
    """Replace the remote's store record with a commit of ``store.json`` = ``text``, as anyone with
    push access can (plumbing, no git-pf)."""
    blob = sh("git", "hash-object", "-w", "--stdin", cwd=remote, input=text).stdout.strip()
    tree = sh("git", "mktree", cwd=remote, input=f"100644 blob {blob}\tstore.json\n").stdout.strip()
    commit = sh("git", "commit-tree", tree, "-m", "record", cwd=remote).stdout.strip()
    sh("git", "update-ref", "refs/pf/meta/store", commit, cwd=remote)


def _record(remote) -> dict:
    return json.loads(sh("git", "cat-file", "blob", "refs/pf/meta/store:store.json", cwd=remote).stdout)


def _new_image(repo, tmp, name: str, size: int = 2 * MiB) -> None:
    sb = tmp / f"sb-{name}"
    sb.mkdir()
    (sb / f"{name}.bin").write_bytes(name.encode() * (size // len(name)))
    pf("snapshot", "--fs-root", sb, "-m", name, cwd=repo)


def _one_line(text: str) -> str:
    lines = text.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in text, text
    return lines[0]


@pytest.mark.parametrize("attacker", ["lfs", "s3"])
def test_a_redirected_store_record_is_reported_and_uploads_go_to_the_pinned_store(tmp_path, attacker):
    a, _ = source_repo(tmp_path, 2 * MiB)
    remote = origin_of(a, tmp_path)
    with hostile_lfs() as good, trap() as (evil, seen):
        pf("remote-store", "origin", "lfs:" + good.endpoint, cwd=a)
        pf("push", "origin", "main", cwd=a)
        b = tmp_path / "b"
        cloned = pf("clone", remote, b, cwd=tmp_path)
        assert "pinned" in cloned.stdout and good.endpoint in cloned.stdout  # the clone says what it pinned
        assert sh("git", "config", "pf.remote.origin.store", cwd=b).stdout == f"lfs:{good.endpoint}\n"

        # someone with push access points the record at their own server (or bucket)
        redirect = evil if attacker == "lfs" else "s3://attacker-bucket/loot"
        _write_record(remote, json.dumps({"adapter": attacker, "url": redirect}) + "\n")
        _new_image(b, tmp_path, "second")
        fetched = pf("fetch", cwd=b)
        line = _one_line(fetched.stderr)
        assert line.startswith("warning: remote 'origin' records its objects at") and redirect in line
        assert "not used" in line and good.endpoint in line and "--accept" in line
        assert sh("git", "config", "pf.remote.origin.store", cwd=b).stdout == f"lfs:{good.endpoint}\n"
        before = set(good.objects)
        pushed = pf("push", "origin", "main", cwd=b)
        assert f"to the lfs server {good.endpoint}" in pushed.stdout  # push says where objects go
        assert set(good.objects) > before  # the new image's objects went to the pinned server
        assert _record(remote) == {"adapter": "lfs", "url": good.endpoint}  # and the record names it again
        # the clone's objects are all on the pinned server: a third clone checks out from there
        c = tmp_path / "c"
        pf("clone", remote, c, cwd=tmp_path)
        pf("checkout", "main", "--into", tmp_path / "out", cwd=c)
        assert (tmp_path / "out" / "second.bin").read_bytes().startswith(b"second")
    assert seen == []  # nothing reached the attacker's server


def test_a_record_no_one_confirmed_is_not_used_until_accepted(tmp_path):
    a, _ = source_repo(tmp_path, 2 * MiB)
    remote = origin_of(a, tmp_path)
    with hostile_lfs() as lfs:
        pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
        pf("push", "origin", "main", cwd=a)
        c = tmp_path / "c"
        pf("init", c, cwd=tmp_path)
        sh("git", "remote", "add", "origin", remote, cwd=c)
        note = _one_line(pf("fetch", cwd=c).stderr)  # not a clone: nothing is pinned
        assert note.startswith("note: remote 'origin' records its objects at") and lfs.endpoint in note
        pf("branch", "mine", "main", cwd=c)
        pf("switch", "mine", cwd=c)
        _new_image(c, tmp_path, "third")
        before = dict(lfs.objects)
        refused = pf("push", "origin", "mine", cwd=c, check=False)
        assert refused.returncode == 2 and "git pf remote-store origin --accept" in _one_line(refused.stderr)
        assert lfs.objects == before and "refs/pf/heads/mine" not in sh("git", "for-each-ref", cwd=remote).stdout
        lazy = pf("checkout", "main", "--into", tmp_path / "out", cwd=c, check=False)  # nor read from
        assert lazy.returncode != 0 and "--accept" in _one_line(lazy.stderr) and lfs.gets == []
        accepted = pf("remote-store", "origin", "--accept", "--json", cwd=c)
        assert json.loads(accepted.stdout)["source"] == "config" and accepted.stderr == ""
        assert sh("git", "config", "pf.remote.origin.store", cwd=c).stdout == f"lfs:{lfs.endpoint}\n"
        pf("push", "origin", "mine", cwd=c)
        assert set(lfs.objects) > set(before)


def test_plain_http_stores_are_refused_unless_allowed_or_loopback(tmp_path):
    a, _ = source_repo(tmp_path, 4 * KiB)
    remote = origin_of(a, tmp_path)
    plain = "http://lfs.example.com/team/images.git/info/lfs"
    refused = pf("remote-store", "origin", "lfs:" + plain, cwd=a, check=False)
    assert refused.returncode == 2 and "plain http" in _one_line(refused.stderr)
    assert "pf.remote.origin.allowHttp" in refused.stderr
    # a setting written by hand is refused where it is used, before anything is sent
    sh("git", "config", "pf.remote.origin.store", "lfs:" + plain, cwd=a)
    proc = pf("push", "origin", "main", cwd=a, check=False)
    assert proc.returncode == 2 and "plain http" in _one_line(proc.stderr)
    assert sh("git", "for-each-ref", cwd=remote).stdout == ""
    sh("git", "config", "pf.remote.origin.allowHttp", "true", cwd=a)
    pf("remote-store", "origin", "lfs:" + plain, cwd=a)  # allowed now
    # a clone does not pin a plain-http record: it says so, and the clone works
    sh("git", "config", "--unset", "pf.remote.origin.store", cwd=a)
    pf("push", "origin", "main", cwd=a)
    _write_record(remote, json.dumps({"adapter": "lfs", "url": plain}) + "\n")
    cloned = pf("clone", remote, tmp_path / "b", cwd=tmp_path)
    assert "plain http" in _one_line(cloned.stderr) and "not pinned" in cloned.stderr
    assert sh("git", "config", "pf.remote.origin.store", cwd=tmp_path / "b", check=False).stdout == ""
    assert "refs/pf/heads/main" in sh("git", "for-each-ref", cwd=tmp_path / "b").stdout


def test_a_malformed_record_is_a_warning_and_fetch_goes_on(tmp_path):
    a, _ = source_repo(tmp_path, 4 * KiB)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a)
    _write_record(remote, "not json at all\n")
    b = tmp_path / "b"
    cloned = pf("clone", remote, b, cwd=tmp_path)
    line = _one_line(cloned.stderr)
    assert line.startswith("warning: the store record of remote 'origin' is not a valid store record")
    _new_image(a, tmp_path, "again")
    pf("push", "origin", "main", cwd=a)  # the malformed record does not stop a push either
    fetched = pf("fetch", "--json", cwd=b)
    assert json.loads(fetched.stdout)["updated"] == ["main"]
    plain = pf("fetch", cwd=b)
    assert plain.returncode == 0 and "not a valid store record" in _one_line(plain.stderr)


def _tag_scene(tmp_path):
    """Remote with image tag ``release`` at a later image than the local, never-pushed ``release``
    of clone ``b`` (a fast-forward of it, which git itself would take without ``+``)."""
    a, _ = source_repo(tmp_path, 4 * KiB)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a)
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    mine = sh("git", "rev-parse", "refs/pf/heads/main", cwd=b).stdout.strip()
    sh("git", "update-ref", "refs/pf/tags/release", mine, cwd=b)
    _new_image(a, tmp_path, "theirs")
    theirs = sh("git", "rev-parse", "refs/pf/heads/main", cwd=a).stdout.strip()
    sh("git", "update-ref", "refs/pf/tags/release", theirs, cwd=a)
    sh("git", "update-ref", "refs/pf/tags/v2", theirs, cwd=a)
    pf("push", "origin", "--all", cwd=a)
    return b, mine, theirs


def test_fetch_never_moves_a_local_tag_and_says_so_in_one_line(tmp_path):
    b, mine, theirs = _tag_scene(tmp_path)
    proc = pf("fetch", cwd=b)
    assert proc.returncode == 0
    assert _one_line(proc.stderr) == ("warning: tag release differs from origin's; yours is kept "
                                      "(theirs: refs/pf/remotes/origin/tags/release)")
    assert sh("git", "rev-parse", "refs/pf/tags/release", cwd=b).stdout.strip() == mine
    assert sh("git", "rev-parse", "refs/pf/remotes/origin/tags/release", cwd=b).stdout.strip() == theirs
    # everything else still came: the branch moved on, the new tag was created
    assert sh("git", "rev-parse", "refs/pf/heads/main", cwd=b).stdout.strip() == theirs
    assert sh("git", "rev-parse", "refs/pf/tags/v2", cwd=b).stdout.strip() == theirs
    assert "new tag v2" in proc.stdout
    again = json.loads(pf("fetch", "--json", cwd=b).stdout)
    assert again["kept_tags"] == ["release"] and again["new_tags"] == []


def test_plain_git_fetch_through_installed_refspecs_never_moves_a_local_tag(tmp_path):
    b, mine, theirs = _tag_scene(tmp_path)
    forcing = [v for v in sh("git", "config", "--get-all", "remote.origin.fetch", cwd=b).stdout.split()
               if v.startswith("+") and v.split(":")[1].startswith(("refs/pf/tags", "refs/pf/heads"))]
    assert forcing == []  # install (run by clone) maps nothing the remote says onto a local ref
    sh("git", "fetch", "-q", "origin", cwd=b)
    assert sh("git", "rev-parse", "refs/pf/tags/release", cwd=b).stdout.strip() == mine
    assert sh("git", "rev-parse", "refs/pf/remotes/origin/tags/release", cwd=b).stdout.strip() == theirs


def test_install_takes_out_the_forced_tag_refspec_an_older_install_wrote(tmp_path):
    b, mine, _ = _tag_scene(tmp_path)
    state_path = b / ".git" / "pf" / "install.json"
    state = json.loads(state_path.read_text())
    old = "+refs/pf/tags/*:refs/pf/tags/*"
    state["config"].append(["remote.origin.fetch", old])  # as an older install recorded it
    state_path.write_text(json.dumps(state))
    sh("git", "config", "--add", "remote.origin.fetch", old, cwd=b)
    out = pf("install", cwd=b).stdout
    assert f"removed remote.origin.fetch={old}" in out
    assert old not in sh("git", "config", "--get-all", "remote.origin.fetch", cwd=b).stdout
    pf("fetch", cwd=b)  # even with such a refspec back in config, git pf fetch ignores configured ones
    sh("git", "config", "--add", "remote.origin.fetch", old, cwd=b)
    pf("fetch", cwd=b)
    assert sh("git", "rev-parse", "refs/pf/tags/release", cwd=b).stdout.strip() == mine
