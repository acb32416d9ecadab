"""A world merge needs no git process where its result is provably git's (``merge.pathwise``):
for any three worlds (files, executable bits, symlinks, nested directories, additions,
modifications, deletions and type changes on either side, identical changes on both), the
path-wise merge, where it answers, is ``git merge-tree --write-tree``'s clean result, tree id for
tree id, with the changes a diff of it lists; and it declines (git merges) wherever a path is
changed differently by both sides or a deletion or type change lies in a directory both
changed. A merge it answers works with no git installed."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, example, given, settings, strategies as st

from git_pf import Repo
from git_pf.image.tree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, TreeWriter
from git_pf.layers.world import gitmerge
from git_pf.merge import pathwise, treeplan
from merge_helpers import snap

DIRS = ["", "d/", "d/e/", "x/"]
LEAVES = ["a", "b", "c"]
PATHS = [d + n for d in DIRS for n in LEAVES]
MODES = [MODE_FILE, MODE_FILE, MODE_EXEC, MODE_LINK, 0o100664]
SIG = pygit2.Signature("t", "t@localhost", 0, 0)

World = dict[str, tuple[int, bytes]]  # path -> (mode, content)


def _valid(w: World) -> bool:
    """No path is both a file and a directory."""
    return not any(p.startswith(q + "/") for p in w for q in w)


@st.composite
def change(draw, w: World) -> World:
    out = dict(w)
    for _ in range(draw(st.integers(1, 4))):
        path = draw(st.sampled_from(PATHS + ["d", "x/a/b"]))
        action = draw(st.sampled_from(["edit", "edit", "add", "mode", "delete"]))
        if action == "delete":
            out.pop(path, None)
        elif action == "mode" and path in out:
            out[path] = (draw(st.sampled_from([MODE_FILE, MODE_EXEC, MODE_LINK])), out[path][1])
        else:
            out[path] = (out.get(path, (MODE_FILE,))[0], draw(st.sampled_from([b"1\n", b"2\n", b"3\n", b"4\n"])))
    return out


@st.composite
def triples(draw):
    base = {p: (draw(st.sampled_from(MODES)), draw(st.sampled_from([b"1\n", b"2\n"])))
            for p in draw(st.sets(st.sampled_from(PATHS), max_size=8))}
    both = draw(change(base)) if draw(st.booleans()) else base  # identical changes on both sides
    ours = draw(change(both)) if draw(st.booleans()) else both
    theirs = draw(change(both)) if draw(st.booleans()) else both
    return (base if draw(st.integers(0, 9)) else None), ours, theirs


def _tree(git, w: World) -> bytes:
    writer, dirs = TreeWriter(git), {}
    for path, (mode, data) in w.items():
        parent, _, name = path.rpartition("/")
        dirs.setdefault(parent, []).append((name.encode(), mode, writer.write_blob(data)))
    for d in sorted({p.rpartition("/")[0] for p in w}, key=len, reverse=True):
        while d:  # every ancestor exists
            d = d.rpartition("/")[0]
            dirs.setdefault(d, [])
    for d in sorted(dirs, key=lambda d: d.count("/") + bool(d), reverse=True):
        oid = writer.write(dirs[d])
        if not d:
            return oid
        parent, _, name = d.rpartition("/")
        dirs[parent].append((name.encode(), MODE_TREE, oid))
    return writer.write([])


def _under(w: World, d: str) -> World:
    return {p: e for p, e in w.items() if p.startswith(d)}


def _must_decline(base: World, ours: World, theirs: World) -> bool:
    """Whether a path is changed differently by both sides, or a side deletes a path (or turns a
    file into a directory) in a directory both sides changed, and changed differently."""
    for p in base.keys() | ours.keys() | theirs.keys():
        b, o, t = base.get(p), ours.get(p), theirs.get(p)
        if o != b and t != b and o != t:
            return True
        d = p.rpartition("/")[0] + "/" if "/" in p else ""
        changed = [_under(w, d) != _under(base, d) for w in (ours, theirs)]
        if b is not None and None in (o, t) and all(changed) and _under(ours, d) != _under(theirs, d):
            return True
    return False


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(triples())
@example(({"a": (MODE_LINK, b"1\n"), "c": (MODE_FILE, b"1\n")}, {"a": (MODE_LINK, b"1\n"), "c": (MODE_FILE, b"2\n")},
          {"a": (MODE_FILE, b"1\n"), "c": (MODE_FILE, b"1\n")}))  # a type change listed as libgit2 lists it
@example((None, {"d/a": (0o100664, b"1\n")}, {"d/a": (0o100664, b"1\n")}))  # git rewrites a mode it merges again
@example(({"d/a": (0o100664, b"1\n"), "c": (MODE_FILE, b"1\n")}, {"d/a": (0o100664, b"1\n"), "c": (MODE_FILE, b"2\n")},
          {"d/a": (0o100664, b"1\n"), "c": (MODE_FILE, b"1\n"), "x/a": (MODE_FILE, b"3\n")}))  # ... but not one it takes
# as is
def test_a_path_wise_merge_is_git_s_merge_or_declines(three):
    base, ours, theirs = three
    if not all(_valid(w) for w in three if w is not None):
        return
    with tempfile.TemporaryDirectory() as d:
        git = pygit2.init_repository(str(Path(d) / "r"), bare=True)
        b = _tree(git, base) if base is not None else None
        o, t = _tree(git, ours), _tree(git, theirs)
        found = pathwise.merge(git, b, o, t)
        if found is None:
            return
        assert base is None or not _must_decline(base, ours, theirs)
        parents = [str(git.create_commit(None, SIG, SIG, "b", pygit2.Oid(raw=b), []))] if b else []
        oc, tc = (str(git.create_commit(None, SIG, SIG, m, pygit2.Oid(raw=x), parents)) for m, x in (("o", o), ("t", t)))
        tm = gitmerge.merge_tree(git.path, oc, tc, unrelated=b is None)
        tree, changes = found
        assert tm.clean and tree.hex() == tm.tree
        assert changes == treeplan.diff(git, o, tree)


def test_a_merge_of_paths_changed_on_one_side_runs_no_git(tmp_path, monkeypatch):
    base = {f"pkg/m{i}.py": f"{i}\n" for i in range(6)} | {"lib/a.py": "a\n", "top.txt": "t\n"}
    repo, _ = Repo.init(tmp_path / "repo")
    b = snap(repo, "main", base)
    repo.create_branch("side", b.id)
    ours = {k: v for k, v in base.items() if k != "lib/a.py"} | {"pkg/m0.py": "ours\n", "new/o.py": "o\n", "lib/a.py*": "a\n"}
    snap(repo, "main", ours)
    snap(repo, "side", dict(base, **{"pkg/m1.py": "theirs\n", "lib/b.py": "b\n", "top.txt": "T\n"}))
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    result = repo.merge("side", into="main")
    assert result.status == "merged"
    world = next(r for r in result.layers if r.layer == "world")
    assert world.report["changed"] == 3  # pkg/m1.py, lib/b.py, top.txt
    merged = repo.git.revparse_single(f"{result.image.id}:world/fs")
    assert (merged / "pkg" / "m0.py").data == b"ours\n" and (merged / "pkg" / "m1.py").data == b"theirs\n"
    assert (merged / "lib" / "a.py").filemode == MODE_EXEC and (merged / "new" / "o.py").data == b"o\n"
    conflicting = snap(repo, "side", dict(base, **{"pkg/m0.py": "theirs too\n"}))
    assert conflicting is not None
    with pytest.raises(Exception, match="git is not installed"):
        repo.merge("side", into="main")  # a path changed on both sides: git merges it
