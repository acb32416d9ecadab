"""The merge lists the changes from ours' world to git's merged world by walking both, each tree
read once (``merge.treeplan.changes``): whatever the worlds (renames, names added or removed,
modes changed), the changes and the summary are what a diff of git's result gives; and ours'
trees, read as they are for it, vouch for nothing in the safety check of git's result."""
from __future__ import annotations

import tempfile
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, given, settings

from git_pf import Repo
from git_pf.core.errors import DataError
from git_pf.image import manifest as img, safepath
from git_pf.image.tree import encode_tree, read_tree
from git_pf.layers.world import gitmerge
from git_pf.merge import treeplan
from merge_helpers import snap, write_world
from test_merge_property import _no_clash, triples

BODY = "".join(f"line {i}\n" for i in range(12))


def _edit(text: str, line: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line] = new + "\n"
    return "".join(lines)


def _raw_world(repo: Repo, image) -> bytes:
    return bytes.fromhex(img.subtree(repo.git, image.tree, img.WORLD_FS))


def _git_merge(repo: Repo, base, ours, theirs) -> str:
    stand = gitmerge.stand_ins(repo.git, ours.id, theirs.id, [base.id])
    return gitmerge.merge_tree(repo.git_dir, *stand, unrelated=False).tree


def _three(tmp_path: Path):
    base = {f"pkg/m{i}.py": BODY for i in range(6)} | {f"lib/sub/s{i}.py": BODY for i in range(4)}
    base |= {f"only/t{i}.py": BODY for i in range(3)} | {"top.txt": BODY}
    ours = dict(base, **{"pkg/m0.py": _edit(BODY, 0, "ours"), "pkg/m1.py": _edit(BODY, 0, "ours both"),
                         "lib/sub/s0.py": _edit(BODY, 1, "ours")})
    theirs = dict(base, **{"pkg/m2.py": _edit(BODY, 11, "theirs"), "pkg/m1.py": _edit(BODY, 11, "theirs both"),
                           "lib/sub/s3.py": _edit(BODY, 2, "theirs"), "only/t1.py": "theirs alone\n",
                           "top.txt": _edit(BODY, 5, "theirs")})
    repo, _ = Repo.init(tmp_path / "repo")
    b = snap(repo, "main", base)
    repo.create_branch("side", b.id)
    return repo, b, snap(repo, "main", ours), snap(repo, "side", theirs)


def test_the_changes_are_those_a_diff_of_git_s_result_lists(tmp_path):
    repo, b, o, t = _three(tmp_path)
    git = repo.git
    merged = bytes.fromhex(_git_merge(repo, b, o, t))
    found = treeplan.changes(git, _raw_world(repo, o), merged)
    assert found == treeplan.diff(git, _raw_world(repo, o), merged)
    assert {p for p, _, _ in found} == {b"pkg/m1.py", b"pkg/m2.py", b"lib/sub/s3.py", b"only/t1.py", b"top.txt"}


def test_the_merged_summary_is_a_snapshot_s(tmp_path):
    """The world summary a merge writes (files, bytes) is what a snapshot of the same world
    counts."""
    repo, b, o, t = _three(tmp_path)
    result = repo.merge("side", into="main")
    assert result.status == "merged"
    merged = result.image.manifest["layers"]["world"]
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "out"
        repo.checkout(result.image.id, out)
        again = Repo.init(Path(d) / "again")[0].snapshot(out, name="main").image
    counted = again.manifest["layers"]["world"]
    assert (merged["files"], merged["bytes"]) == (counted["files"], counted["bytes"])
    world_layer = next(r for r in result.layers if r.layer == "world")
    assert world_layer.report["changed"] == 5


def test_a_rename_or_a_new_name_merges_as_git_does(tmp_path):
    repo, b, o, _ = _three(tmp_path)
    base_files = {f"pkg/m{i}.py": BODY for i in range(6)}
    theirs = snap(repo, "side", dict(base_files, **{"pkg/renamed.py": _edit(BODY, 11, "theirs")}) | {
        f"lib/sub/s{i}.py": BODY for i in range(4)} | {f"only/t{i}.py": BODY for i in range(3)} | {"top.txt": BODY})
    git = repo.git
    merged = bytes.fromhex(_git_merge(repo, b, o, theirs))
    found = treeplan.changes(git, _raw_world(repo, o), merged)
    assert found == treeplan.diff(git, _raw_world(repo, o), merged)
    assert any(p == b"pkg/renamed.py" for p, _, _ in found)
    result = repo.merge("side", into="main")
    assert result.status == "merged"
    assert img.subtree(git, result.image.tree, img.WORLD_FS) == merged.hex()
    world_layer = next(r for r in result.layers if r.layer == "world")
    assert world_layer.report["changed"] == len(found)


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(triples())
def test_the_changes_listed_are_always_a_diff_of_git_s_answer(three):
    """Whatever the three worlds, the changes listed are exactly those of a diff of git's merged
    world, in the same order."""
    if not all(_no_clash(w) for w in three):
        return
    with tempfile.TemporaryDirectory() as d:
        repo, _ = Repo.init(Path(d) / "repo")
        b = snap(repo, "main", three[0])
        repo.create_branch("side", b.id)
        o, t = snap(repo, "main", three[1]), snap(repo, "side", three[2])
        ours = _raw_world(repo, o)
        merged = bytes.fromhex(_git_merge(repo, b, o, t))
        assert treeplan.changes(repo.git, ours, merged) == treeplan.diff(repo.git, ours, merged)


def _one_directory(tmp_path: Path):
    """A snapshotted world holding one directory ``d`` of two files: (repo's git, the world's raw
    id, d's (name, mode), d's entries, a writer of a tree of given entries, its raw id)."""
    sb = tmp_path / "sb"
    write_world(sb, {"d/a.py": "a\n", "d/b.py": "b\n"})
    repo, _ = Repo.init(tmp_path / "repo")
    git = repo.git
    root = _raw_world(repo, repo.snapshot(sb, name="main").image)
    (name, mode, d), = read_tree(git, root)

    def tree(entries) -> bytes:
        return git.odb.write(pygit2.enums.ObjectType.TREE, encode_tree(entries)).raw

    return git, root, (name, mode), read_tree(git, d), tree


def test_a_tree_read_as_it_is_vouches_for_nothing(tmp_path):
    """The merge reads ours' trees as they are to list its changes (``counterpart_shape``); a tree read
    so that holds '..' (a crafted one) is still refused wherever a world holds it, or holds a tree
    of the same entries with other ids."""
    git, root, (name, mode), ((_, fm, fo), (sn, sm, so)), tree = _one_directory(tmp_path)
    evil = tree([(b"..", fm, fo), (sn, sm, so)])
    assert safepath.counterpart_shape(git, evil) is not None
    alike = tree([(b"..", fm, so), (sn, sm, fo)])  # the same entries, other ids
    for inner in (evil, alike):
        world = tree([(name, mode, inner)])
        with pytest.raises(DataError) as e:
            safepath.check_tree(git, world.hex(), likes=(root.hex(),))
        assert "d/.." in e.value.message


def test_many_directories_only_theirs_changed_are_listed(tmp_path):
    """Directories theirs' as they are, and one where theirs added a name (diffed by libgit2),
    are all listed; the merge counts every change."""
    n = 10
    base = {f"t{i}/a.py": BODY for i in range(n)} | {"both/x.py": BODY, "both/y.py": BODY}
    repo, _ = Repo.init(tmp_path / "repo")
    b = snap(repo, "main", base)
    repo.create_branch("side", b.id)
    o = snap(repo, "main", dict(base, **{"both/x.py": "ours\n"}))
    t = snap(repo, "side", dict(base, **{"both/y.py": "theirs\n", "t0/new.py": "new\n"},
                                **{f"t{i}/a.py": f"theirs {i}\n" for i in range(n)}))
    merged = bytes.fromhex(_git_merge(repo, b, o, t))
    found = treeplan.changes(repo.git, _raw_world(repo, o), merged)
    assert found == treeplan.diff(repo.git, _raw_world(repo, o), merged)
    result = repo.merge("side", into="main")
    world_layer = next(r for r in result.layers if r.layer == "world")
    assert world_layer.report["changed"] == n + 2
