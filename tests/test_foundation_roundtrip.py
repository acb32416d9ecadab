"""Snapshot then checkout gives back the sandbox exactly; the tree is deterministic and
readable by an independent git implementation (dulwich)."""
from __future__ import annotations

import os
import string
from pathlib import Path

import dulwich.repo
from hypothesis import HealthCheck, given, settings, strategies as st

from git_pf import Repo
from world_helpers import describe, make_sandbox

from conftest import git_fsck_clean


def test_checkout_restores_every_kind_of_file(repo, tmp_path):
    sb = make_sandbox(tmp_path / "sb", big=3 * 1024 * 1024)
    snap = repo.snapshot(sb, name="main", message="first")
    assert snap.stats.pointers == 1
    out = repo.checkout("main", tmp_path / "out").path
    assert describe(out) == describe(sb)


def test_same_state_gives_same_tree(repo, tmp_path):
    sb = make_sandbox(tmp_path / "sb")
    a = repo.snapshot(sb, name="a", messages=[{"role": "user", "content": "hi"}])
    b = repo.snapshot(sb, name="b", messages=[{"role": "user", "content": "hi"}])
    assert a.image.tree == b.image.tree
    assert a.image.id != b.image.id or a.image.parents == b.image.parents


def test_unchanged_resnapshot_writes_no_image(repo, tmp_path):
    sb = make_sandbox(tmp_path / "sb")
    first = repo.snapshot(sb, name="main")
    again = repo.snapshot(sb, name="main")
    assert again.unchanged and again.image.id == first.image.id
    forced = repo.snapshot(sb, name="main", allow_empty=True)
    assert forced.image.parents == (first.image.id,) and forced.image.tree == first.image.tree


def test_dulwich_reads_back_the_same_tree(repo, tmp_path):
    sb = make_sandbox(tmp_path / "sb")
    snap = repo.snapshot(sb, name="main")
    d = dulwich.repo.Repo(str(tmp_path / "repo"))
    commit = d[snap.image.id.encode()]
    assert commit.tree.decode() == snap.image.tree
    assert d.refs[b"refs/pf/heads/main"] == snap.image.id.encode()
    tree = d[commit.tree]
    world = d[tree[b"world"][1]]
    fs = d[world[b"fs"][1]]
    assert d[d[fs[b"src"][1]][b"main.py"][1]].data == b"print('hello')\n"
    mode, link = d[fs[b"src"][1]][b"run.sh"]
    assert mode == 0o100755
    assert d[fs[b"link_rel"][1]].data == b"src/main.py" and fs[b"link_rel"][0] == 0o120000
    assert b"caf\xe9-latin1.txt" in [e.path for e in fs.items()]
    inner = d[fs[b"inner"][1]]
    assert b".pf-esc-.git" in [e.path for e in inner.items()]  # git trees may not hold ".git"


def test_ignore_rules(repo, tmp_path):
    sb = tmp_path / "sb"
    (sb / "build").mkdir(parents=True)
    (sb / "build" / "out.o").write_text("o")
    (sb / "keep.log").write_text("k")
    (sb / "drop.log").write_text("d")
    (sb / "sub").mkdir()
    (sb / "sub" / ".gitignore").write_text("*.tmp\n")
    (sb / "sub" / "a.tmp").write_text("t")
    (sb / "top.tmp").write_text("t")
    (sb / ".gitignore").write_text("build/\n*.log\n!keep.log\n")
    (sb / ".pf").mkdir()
    (sb / ".pf" / "x").write_text("never captured")
    repo.snapshot(sb, name="main", ignore=["top.tmp"])
    out = repo.checkout("main", tmp_path / "out").path
    names = sorted(os.fsdecode(p) for p in describe(out))
    assert names == [".gitignore", "keep.log", "sub", "sub/.gitignore"]


def test_hard_links_become_copies_and_fifos_are_skipped(repo, tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "a").write_text("same")
    os.link(sb / "a", sb / "b")
    os.mkfifo(sb / "pipe")
    snap = repo.snapshot(sb, name="main")
    assert any("pipe" in w and "fifo" in w for w in snap.stats.skipped)
    out = repo.checkout("main", tmp_path / "out").path
    assert (out / "b").read_text() == "same" and os.stat(out / "a").st_ino != os.stat(out / "b").st_ino
    assert not (out / "pipe").exists()


_names = st.text(alphabet=string.ascii_letters + string.digits + "._- é", min_size=1, max_size=8).filter(
    lambda n: n not in (".", "..", ".pf", ".git") and not n.startswith(".pf-esc-"))
_files = st.tuples(st.binary(max_size=300), st.sampled_from([0o644, 0o755, 0o600, 0o444]),
                   st.dictionaries(st.sampled_from(["user.a", "user.b"]), st.binary(max_size=20), max_size=2))
_tree = st.recursive(
    st.dictionaries(_names, _files, max_size=4),
    lambda children: st.dictionaries(_names, st.one_of(_files, children, st.just("LINK")), max_size=4),
    max_leaves=12,
)


def _build(root: Path, spec: dict) -> None:
    root.mkdir(exist_ok=True)
    for name, item in spec.items():
        path = root / name
        if item == "LINK":
            path.symlink_to(f"../{name}-target")
        elif isinstance(item, dict):
            _build(path, item)
        else:
            data, mode, xattrs = item
            path.write_bytes(data)
            for k, v in xattrs.items():
                os.setxattr(path, k, v)
            os.chmod(path, mode)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(spec=_tree)
def test_roundtrip_property(tmp_path_factory, spec):
    base = tmp_path_factory.mktemp("prop")
    r, _ = Repo.init(base / "repo")
    sb = base / "sb"
    _build(sb, spec)
    r.snapshot(sb, name="main", allow_empty=True)
    out = r.checkout("main", base / "out").path
    assert describe(out) == describe(sb)
    git_fsck_clean(base / "repo")
