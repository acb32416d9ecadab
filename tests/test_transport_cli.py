"""Transport commands as a user meets them: every mistake is one line on stderr and a non-zero exit."""
from __future__ import annotations

import json

from transport_helpers import bare, origin_of, pf, sh, source_repo


def _one_line(proc, code, needle):
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr and needle in lines[0], proc.stderr


def test_mistakes_are_one_line_errors(tmp_path):
    a, _ = source_repo(tmp_path)
    _one_line(pf("push", "nosuch", cwd=a, check=False), 2, "nosuch")
    sh("git", "remote", "add", "origin", bare(tmp_path / "r.git"), cwd=a)
    image = json.loads(pf("show", "main", "--json", cwd=a).stdout)["id"]
    _one_line(pf("push", "origin", image[:12], cwd=a, check=False), 2, "not an image branch or tag")
    _one_line(pf("push", "origin", "nobranch", cwd=a, check=False), 2, "nobranch")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    _one_line(pf("clone", tmp_path / "r.git", tmp_path / "full", cwd=tmp_path, check=False), 2, "already exists")
    _one_line(pf("clone", tmp_path / "missing.git", tmp_path / "n", cwd=tmp_path, check=False), 2, "does not exist")
    sh("git", "remote", "add", "gone", tmp_path / "gone.git", cwd=a)
    # a configured remote that cannot be reached is a failed transfer, not bad input
    _one_line(pf("fetch", "gone", cwd=a, check=False), 1, "gone")
    _one_line(pf("gc", cwd=tmp_path, check=False), 2, "not a git repository")
    _one_line(pf("install", "--remote", "nosuch", cwd=a, check=False), 2, "nosuch")
    sh("git", "config", "pf.remote.origin.store", "ftp", cwd=a)
    _one_line(pf("push", "origin", "main", cwd=a, check=False), 2, "unknown adapter")


def test_push_json_and_a_second_push_sends_nothing(tmp_path):
    a, _ = source_repo(tmp_path)
    sh("git", "remote", "add", "origin", bare(tmp_path / "r.git"), cwd=a)
    proc = pf("push", "--json", cwd=a)
    assert proc.stderr == ""  # not a terminal: no progress output at all
    first = json.loads(proc.stdout)
    assert first["refs"] == ["refs/pf/heads/main"] and first["sent_objects"] == first["objects"] > 0
    again = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    assert again["sent_objects"] == 0 and again["sent_bytes"] == 0
    proc = pf("fetch", cwd=a)
    assert proc.stderr == "" and proc.stdout == ""
    fetched = json.loads(pf("fetch", "--json", cwd=a).stdout)
    assert fetched["diverged"] == [] and fetched["created"] == []


def test_fetch_fast_forwards_and_never_overwrites_a_diverged_branch(tmp_path):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    pf("push", cwd=a)
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    (sb / "sub" / "note.txt").write_text("second\n")
    second = pf("snapshot", "--fs-root", sb, "-m", "second", cwd=a).stdout.strip()
    pf("push", cwd=a)
    assert json.loads(pf("fetch", "--json", cwd=b).stdout)["updated"] == ["main"]
    assert json.loads(pf("show", "main", "--json", cwd=b).stdout)["id"] == second
    mine_sb = tmp_path / "mine"
    mine_sb.mkdir()
    (mine_sb / "f").write_text("b's own work\n")
    mine = pf("snapshot", "--fs-root", mine_sb, "-m", "b", cwd=b).stdout.strip()
    (sb / "sub" / "note.txt").write_text("third\n")
    third = pf("snapshot", "--fs-root", sb, "-m", "third", cwd=a).stdout.strip()
    pf("push", cwd=a)
    proc = pf("fetch", cwd=b)
    assert "diverged" in proc.stderr and "refs/pf/remotes/origin/heads/main" in proc.stderr
    assert json.loads(pf("show", "main", "--json", cwd=b).stdout)["id"] == mine
    assert json.loads(pf("show", "refs/pf/remotes/origin/heads/main", "--json", cwd=b).stdout)["id"] == third
    # pushing the diverged branch is refused by git, not forced
    proc = pf("push", cwd=b, check=False)
    assert proc.returncode == 1 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
