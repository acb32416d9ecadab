"""The stat cache: whatever changed in the sandbox, an incremental snapshot gives exactly the
tree and fs.attrs a capture without any cache gives, and reads only what changed."""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from git_pf.core import config
from git_pf.image import manifest as img
from git_pf.layers.world import attrs as attrs_mod
from git_pf.layers.world.capture import capture
from git_pf.layers.world.statcache import StatCache
from world_helpers import make_grid


def _settle() -> None:
    time.sleep(0.15)  # past the racy window: the cache trusts what the next snapshot records


def _uncached(repo, sb: Path) -> tuple[str, bytes]:
    """world/fs tree and fs.attrs of a capture with no stat cache."""
    git = repo.git
    cap = capture(git, repo.store, os.fsencode(os.path.realpath(sb)), threshold=config.large_file_threshold(git),
                  ignore=[], cache=StatCache(Path(os.devnull), ()), exclude=set())
    return cap.tree, attrs_mod.encode(cap.attrs)


def _captured(repo, snap) -> tuple[str, bytes]:
    tree = snap.image.tree
    return img.subtree(repo.git, tree, img.WORLD_FS), img.read_file(repo.git, tree, img.WORLD_ATTRS)


def _same_stamp_edit(path: Path, text: str) -> None:
    st = os.stat(path)
    path.write_text(text)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime: only ctime moves


def _replace_file_by_dir(path: Path) -> None:
    path.unlink()
    path.mkdir()
    (path / "inside.txt").write_text("now a directory\n")


def _replace_dir_by_file(path: Path) -> None:
    shutil.rmtree(path)
    path.write_text("now a file\n")


def _retarget(link: Path, target: str) -> None:
    link.unlink()
    link.symlink_to(target)


def _sandbox(root: Path) -> Path:
    sb = make_grid(root, 3, 3)
    (sb / "a" / "b" / "c").mkdir(parents=True)
    (sb / "a" / "b" / "c" / "leaf.txt").write_text("deep\n")
    (sb / "a" / "b" / "c" / "other.txt").write_text("other\n")
    (sb / "a" / "side.txt").write_text("side\n")
    (sb / "link").symlink_to("d0/f0.txt")
    (sb / "gone").mkdir()
    (sb / "gone" / "x.txt").write_text("x\n")
    return sb


STEPS = [
    ("edit deep in an unchanged tree, same size and mtime", lambda sb: _same_stamp_edit(sb / "a/b/c/leaf.txt", "DEEP\n")),
    ("chmod only", lambda sb: os.chmod(sb / "d0/f0.txt", 0o600)),
    ("executable bit only", lambda sb: os.chmod(sb / "d0/f1.txt", 0o755)),
    ("xattr only, on a file", lambda sb: os.setxattr(sb / "d1/f0.txt", "user.k", b"v")),
    ("xattr only, on a directory", lambda sb: os.setxattr(sb / "a/b", "user.k", b"v")),
    ("xattr removed", lambda sb: os.removexattr(sb / "d1/f0.txt", "user.k")),
    ("chmod a directory", lambda sb: os.chmod(sb / "a/b/c", 0o700)),
    ("file replaced by a directory", lambda sb: _replace_file_by_dir(sb / "d2/f2.txt")),
    ("directory replaced by a file", lambda sb: _replace_dir_by_file(sb / "a/b/c")),
    ("symlink retargeted", lambda sb: _retarget(sb / "link", "d1/f1.txt")),
    ("file deleted, directory left empty", lambda sb: (sb / "gone/x.txt").unlink()),
    ("directory deleted", lambda sb: (sb / "gone").rmdir()),
    ("file renamed", lambda sb: os.rename(sb / "d1/f2.txt", sb / "d1/f9.txt")),
    (".gitignore added in a parent of unchanged directories", lambda sb: (sb / ".gitignore").write_text("f0.txt\n")),
    (".gitignore in a parent edited", lambda sb: (sb / ".gitignore").write_text("*.txt\n!side.txt\n")),
    (".gitignore in a subdirectory", lambda sb: (sb / "d0/.gitignore").write_text("!f1.txt\n")),
    (".gitignore in a parent removed", lambda sb: (sb / ".gitignore").unlink()),
    ("new file in a new deep directory", lambda sb: (sb / "a/n/m").mkdir(parents=True) or (sb / "a/n/m/new.txt").write_text("n")),
]


def _check_steps(repo, sb: Path, steps) -> None:
    """After each change (out of the racy window), the incremental snapshot equals an
    uncached capture."""
    _settle()
    first = repo.snapshot(sb, name="main")
    assert _captured(repo, first) == _uncached(repo, sb)
    for what, change in steps:
        change(sb)
        _settle()
        snap = repo.snapshot(sb, name="main", allow_empty=True)
        assert _captured(repo, snap) == _uncached(repo, sb), what


def test_incremental_snapshot_equals_an_uncached_capture_after_every_kind_of_change(repo, tmp_path):
    _check_steps(repo, _sandbox(tmp_path / "sb"), STEPS)


def test_remembered_ignore_decisions_follow_new_names_kinds_and_rules(repo, tmp_path):
    sb = tmp_path / "sb"
    (sb / "sub").mkdir(parents=True)
    (sb / ".gitignore").write_text("build/\n*.log\n")
    (sb / "sub" / "build").write_text("a file named build is kept\n")
    (sb / "sub" / "keep.txt").write_text("k\n")
    _check_steps(repo, sb, [
        ("an ignored file appears", lambda sb: (sb / "sub" / "x.log").write_text("log\n")),
        ("a file replaced by a directory that a directory-only pattern ignores",
         lambda sb: _replace_file_by_dir(sb / "sub" / "build")),
        ("the directory pattern dropped", lambda sb: (sb / ".gitignore").write_text("*.log\n")),
        ("a negation keeps the ignored file", lambda sb: (sb / ".gitignore").write_text("*.log\n!x.log\n")),
        ("the ignored file edited", lambda sb: (sb / ".gitignore").write_text("*.log\n")
         or (sb / "sub" / "x.log").write_text("longer log\n")),
    ])


def test_a_deep_edit_reads_one_file_and_an_unchanged_sandbox_none(repo, tmp_path):
    sb = _sandbox(tmp_path / "sb")
    _settle()
    assert repo.snapshot(sb, name="main").stats.files_read == 13  # and one symlink
    _same_stamp_edit(sb / "a/b/c/leaf.txt", "DEEP\n")
    _settle()
    edited = repo.snapshot(sb, name="main")
    assert edited.stats.files_read == 1 and edited.stats.files == 14
    assert repo.diff("main~1", "main").world.changed == ["a/b/c/leaf.txt"]
    again = repo.snapshot(sb, name="main")
    assert again.unchanged and again.stats.files_read == 0 and again.stats.files == 14


def test_an_edit_right_after_a_snapshot_is_not_trusted_to_the_cache(repo, tmp_path):
    sb = tmp_path / "sb"
    (sb / "d").mkdir(parents=True)
    (sb / "d" / "f").write_text("aaaa")
    repo.snapshot(sb, name="main")  # f is racy here: changed within 100 ms of the start
    _same_stamp_edit(sb / "d" / "f", "bbbb")
    second = repo.snapshot(sb, name="main")
    assert second.stats.files_read == 1
    assert repo.checkout("main", tmp_path / "out").path.joinpath("d", "f").read_text() == "bbbb"


def test_a_damaged_cache_is_ignored(repo, tmp_path):
    sb = _sandbox(tmp_path / "sb")
    _settle()
    repo.snapshot(sb, name="main")
    for path in (tmp_path / "repo" / ".git" / "pf" / "statcache").iterdir():
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])
    (sb / "d0" / "f0.txt").write_text("changed\n")
    snap = repo.snapshot(sb, name="main")
    assert snap.stats.files_read == 13
    assert _captured(repo, snap) == _uncached(repo, sb)
