"""`git pf diff -p`: world files as `git diff` prints them; the diff usage line; checkout of
non-world layers naming what it wrote; API errors naming parameters, the CLI naming flags."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from git_pf import Repo
from git_pf.core.errors import UsageError

GIT_ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t", GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null")
LINES = "".join(f"line {i}\n" for i in range(1, 31))


def _state_one(d: Path) -> None:
    (d / "src").mkdir(parents=True)
    (d / "src" / "main.py").write_text(LINES)
    (d / "a-b").write_text("dash\n")
    (d / "a").mkdir()
    (d / "a" / "c").write_text("in a\n")
    (d / "gone.txt").write_text("bye\n")
    (d / "run.sh").write_text("echo hi\n")
    (d / "both.sh").write_text("old\n")
    (d / "blob.bin").write_bytes(b"\x00\x01\x02binary")
    (d / "name with space").write_text("x\n")
    (d / "na\u00efve.txt").write_text("one\n")
    (d / "nonl").write_text("z")
    (d / ".pf-esc-note").write_text("escaped in the tree\n")
    (d / "link").write_text("was a file\n")
    (d / "empty-gone").write_text("")


def _state_two(d: Path) -> None:
    _state_one(d)
    (d / "src" / "main.py").write_text(LINES.replace("line 3\n", "line three\n").replace("line 25\n", ""))
    (d / "a-b").write_text("dash 2\n")
    (d / "a" / "c").write_text("in a 2\n")
    (d / "gone.txt").unlink()
    (d / "new.txt").write_text("hello\nworld\n")
    (d / "new-empty").write_text("")
    (d / "empty-gone").unlink()
    (d / "run.sh").chmod(0o755)
    (d / "both.sh").write_text("new\n")
    (d / "both.sh").chmod(0o755)
    (d / "blob.bin").write_bytes(b"\x00\x01\x02binarz")
    (d / "name with space").write_text("y\n")
    (d / "na\u00efve.txt").write_text("two\n")
    (d / "nonl").write_text("zz")
    (d / ".pf-esc-note").write_text("still escaped\n")
    (d / "link").unlink()
    (d / "link").symlink_to("target")


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True).stdout.decode()


def _git_diff_of(tmp_path: Path, one, two) -> str:
    """What git itself prints for the change from state one to state two (no renames)."""
    g = tmp_path / "plain"
    g.mkdir()
    _git(g, "init", "-q")
    one(g)
    _git(g, "add", "-A")
    _git(g, "commit", "-qm", "one")
    for p in list(g.iterdir()):
        if p.name != ".git":
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
    two(g)
    _git(g, "add", "-A")
    return _git(g, "diff", "--cached", "--no-renames", "--no-color")


def _two_images(repo: Repo, tmp_path: Path, one, two) -> tuple[str, str]:
    ids = []
    for i, fill in enumerate((one, two)):
        sb = tmp_path / f"sb{i}"
        sb.mkdir()
        fill(sb)
        ids.append(repo.snapshot(sb, name="main", message=f"state {i}").image.id)
    return ids[0], ids[1]


def _patch_part(stdout: str) -> str:
    return stdout[stdout.index("diff --git"):]


def test_diff_p_prints_what_git_diff_prints(repo, tmp_path, run_pf):
    a, b = _two_images(repo, tmp_path, _state_one, _state_two)
    expected = _git_diff_of(tmp_path, _state_one, _state_two)
    out = run_pf("diff", a, b, "-p", cwd=tmp_path / "repo").stdout
    assert _patch_part(out) == expected  # byte for byte, index lines included
    assert "+++ b/.pf-esc-note" in out and ".pf-esc-.pf-esc-" not in out
    assert out.startswith("world:   ")


def test_diff_p_shows_real_names_of_escaped_git_dirs(tmp_path, run_pf):
    repo, _ = Repo.init(tmp_path / "repo")  # a world holding .git: no plain git repository can
    sb = tmp_path / "sb"
    (sb / "vendor" / ".git").mkdir(parents=True)
    (sb / "vendor" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    a = repo.snapshot(sb, name="main").image.id
    (sb / "vendor" / ".git" / "HEAD").write_text("ref: refs/heads/dev\n")
    b = repo.snapshot(sb, name="main").image.id
    out = run_pf("diff", a, b, "-p", cwd=tmp_path / "repo").stdout
    assert "diff --git a/vendor/.git/HEAD b/vendor/.git/HEAD\n" in out
    assert "-ref: refs/heads/main\n+ref: refs/heads/dev\n" in out and ".pf-esc-" not in out


def test_diff_p_pointer_files_by_content(repo, tmp_path, run_pf):
    repo.git.config["pf.largeFileThreshold"] = "1k"
    same = os.urandom(5000)

    def one(d):
        (d / "big.txt").write_text("a line\n" * 400)
        (d / "same.bin").write_bytes(same)
        (d / "big.bin").write_bytes(b"\x00" * 3000)

    def two(d):
        one(d)
        (d / "big.txt").write_text("a line\n" * 200 + "changed\n" + "a line\n" * 199)
        (d / "big.bin").write_bytes(b"\x00" * 2999 + b"\x01")

    a, b = _two_images(repo, tmp_path, one, two)
    assert b'"pointer":true' in repo.read_layer(b, "world/fs.attrs.jsonl")
    out = run_pf("diff", a, b, "-p", cwd=tmp_path / "repo").stdout
    assert _patch_part(out) == _git_diff_of(tmp_path, one, two)  # small pointers: read and diffed as git would
    assert "Binary files a/big.bin and b/big.bin differ" in out and "same.bin" not in out


def test_diff_p_large_pointer_is_binary_and_not_read(repo, tmp_path, run_pf):
    repo.git.config["pf.largeFileThreshold"] = "1k"
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "huge.txt").write_bytes(b"text\n" * 1_000_000)  # 5 MB of text, over the diff's read limit
    a = repo.snapshot(sb, name="main").image.id
    (sb / "huge.txt").write_bytes(b"text\n" * 1_000_001)
    b = repo.snapshot(sb, name="main").image.id
    for oid in list(repo.store.iter_oids()):  # nothing may be read: remove every stored object
        repo.store.remove(oid)
    out = run_pf("diff", a, b, "-p", cwd=tmp_path / "repo").stdout
    assert "diff --git a/huge.txt b/huge.txt\nindex " in out
    assert out.endswith("Binary files a/huge.txt and b/huge.txt differ\n")


def test_diff_json_p_carries_a_patch_per_file(repo, tmp_path, run_pf):
    a, b = _two_images(repo, tmp_path, _state_one, _state_two)
    data = json.loads(run_pf("diff", a, b, "-p", "--json", cwd=tmp_path / "repo").stdout)
    patches = {p["path"]: p["patch"] for p in data["world"]["patches"]}
    assert patches["new.txt"].startswith("diff --git a/new.txt b/new.txt\nnew file mode 100644\n")
    assert patches[".pf-esc-note"].endswith("-escaped in the tree\n+still escaped\n")
    assert "".join(p["patch"] for p in data["world"]["patches"]) == _git_diff_of(tmp_path, _state_one, _state_two)
    plain = json.loads(run_pf("diff", a, b, "--json", cwd=tmp_path / "repo").stdout)
    assert "patches" not in plain["world"] and plain["world"]["added"] == data["world"]["added"]


def test_diff_usage_line_names_a_and_b(run_pf):
    out = run_pf("diff", "-h").stdout
    assert "Usage: git pf diff [OPTIONS] A [B]\n" in out  # B is optional with --at-step N
    assert "{" not in out.splitlines()[0]


def test_checkout_of_non_world_layers_lists_the_files_written(repo, tmp_path, run_pf):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f").write_text("x\n")
    repo.snapshot(sb, name="main", messages=[{"role": "user", "content": "hi"}], env={"A": "1"},
                  effects=[{"ts": "2026-01-01T00:00:00Z", "tool": "t", "args": {}, "result": "ok",
                            "idempotency_key": "k1", "side_effect_class": "pure"}])
    out = run_pf("checkout", "main", "--into", tmp_path / "out", "--layers", "trace,effects,env",
                 cwd=tmp_path / "repo").stdout
    assert "0 files" not in out
    assert "3 layer files" in out
    for name in ("trace/messages.jsonl", "effects/ledger.jsonl", "world/env.json"):
        assert name in out and (tmp_path / "out" / name).is_file()
    data = json.loads(run_pf("checkout", "main", "--into", tmp_path / "out2", "--layers", "trace,env", "--json",
                             cwd=tmp_path / "repo").stdout)
    assert {"files", "bytes", "pointers", "id", "path", "layers"} <= data.keys()
    assert "trace/messages.jsonl" in data["layer_files"] and "world/env.json" in data["layer_files"]


def test_api_errors_name_parameters_and_cli_names_flags(repo, tmp_path, run_pf):
    with pytest.raises(UsageError) as e:
        repo.snapshot(tmp_path / "nope", name="main")
    assert e.value.param == "fs_root" and str(e.value).startswith("fs_root: '")
    assert str(e.value).endswith("' does not exist") and "--" not in str(e.value)
    (tmp_path / "sb").mkdir()
    repo.snapshot(tmp_path / "sb", name="main", allow_empty=True)
    with pytest.raises(UsageError) as e:
        repo.checkout("main", tmp_path / "x", layers="bogus")
    assert e.value.param == "layers" and str(e.value).startswith("layers: unknown layer 'bogus'")
    proc = run_pf("checkout", "main", "--into", tmp_path / "x", "--layers", "bogus", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("git pf: error: --layers: unknown layer 'bogus'")
    proc = run_pf("snapshot", "--fs-root", tmp_path / "nope", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 2 and proc.stderr.startswith("git pf: error: --fs-root: '")
    assert re.search(r"does not exist\n$", proc.stderr)
