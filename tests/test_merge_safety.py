"""A first merge (no world marked sound yet) refuses an unsafe world on theirs even when the
unsafe entry sits deep under directories that look unchanged (same names, same sizes), and
still merges a sound one; the refused world is never marked sound."""
from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from git_pf import Repo
from git_pf.core.errors import DataError
from git_pf.image import refs, safepath
from git_pf.image.tree import MODE_TREE, decode_tree, encode_tree, read_tree
from merge_helpers import write_world

DEEP = b"pkg/sub/deep"
FILES = {f"pkg/sub/deep/m{i:02d}.py": f"# {i}\n" for i in range(20)}
FILES.update({f"pkg/other{i}.py": f"# other {i}\n" for i in range(5)} | {"top.txt": "top\n"})


def _raw(entries: list[tuple[bytes, int, bytes]]) -> bytes:
    """A tree's bytes holding ``entries`` in the order given (git's order not enforced)."""
    return b"".join(b"%o %s\0%s" % (mode, name, oid) for name, mode, oid in entries)


def _replace_deep(git, root: bytes, path: bytes, data: bytes) -> bytes:
    """``root`` with the tree at ``path`` replaced by a tree holding exactly ``data``; every tree
    above it keeps its names and order, only the oid on the way down changes."""
    head, _, rest = path.partition(b"/")
    entries = read_tree(git, root)
    out = []
    for name, mode, oid in entries:
        if name == head:
            oid = _replace_deep(git, oid, rest, data) if rest else git.odb.write(pygit2.enums.ObjectType.TREE, data).raw
        out.append((name, mode, oid))
    return git.odb.write(pygit2.enums.ObjectType.TREE, encode_tree(out)).raw


def _hostile_deep(git, deep: bytes, variant: str) -> bytes:
    """The bytes of a tree like ``deep`` (the 20 files) with one unsafe twist (the names of the
    'slash', 'unsorted' and 'duplicate' twists keep their length, so the tree keeps its size)."""
    entries = decode_tree(git.odb.read(pygit2.Oid(raw=deep))[1])
    (n0, m0, o0), (n1, m1, o1) = entries[0], entries[1]
    if variant == "dotdot":
        entries[0] = (b"..", m0, o0)
    elif variant == "dot-git":
        entries[0] = (b".GIT", m0, o0)
    elif variant == "slash":
        entries[0] = (b"m0/.py", m0, o0)
    elif variant == "unsorted":
        entries[0], entries[1] = (n1, m1, o1), (n0, m0, o0)
    elif variant == "duplicate":
        entries[1] = (n0, m1, o1)
    elif variant == "escaped-alias":
        entries.insert(0, (b".pf-esc-m01.py", m0, o0))
    elif variant == "dot-git-dir":
        empty = git.odb.write(pygit2.enums.ObjectType.TREE, b"").raw
        entries.insert(0, (b".git", MODE_TREE, empty))
    return _raw(entries)


def _setup(tmp_path: Path) -> tuple[Repo, str, str]:
    sb = tmp_path / "sb"
    write_world(sb, FILES)
    repo, _ = Repo.init(tmp_path / "repo")
    repo.snapshot(sb, name="main", message="base")
    repo.create_branch("side", "main")
    (sb / "pkg/sub/deep/m05.py").write_text("# ours\n")
    ours = repo.snapshot(sb, name="main", message="ours").image
    (sb / "pkg/sub/deep/m05.py").write_text("# 5\n")
    (sb / "pkg/sub/deep/m07.py").write_text("# theirs\n")
    theirs = repo.snapshot(sb, name="side", message="theirs").image
    return repo, ours.id, theirs.id


def _forget_marks(repo: Repo) -> None:
    """As a fresh process with no sound-tree mark on disk."""
    safepath.forget_sound_trees()
    safepath.prune_sound_trees(repo.git, keep=lambda tree: False)


def _evil_from(repo: Repo, theirs: str, variant: str) -> tuple[str, str]:
    """An image on top of ``theirs``'s parent whose world is theirs' with the deep tree made hostile;
    (commit id, world root hex)."""
    git = repo.git
    commit = git[theirs]
    world = git.revparse_single(f"{theirs}:world/fs").id.raw
    deep = git.revparse_single(f"{theirs}:world/fs/{DEEP.decode()}").id.raw
    evil_world = _replace_deep(git, world, DEEP, _hostile_deep(git, deep, variant))
    root = _replace_deep(git, commit.tree.id.raw, b"world/fs", git.odb.read(pygit2.Oid(raw=evil_world))[1])
    sig = pygit2.Signature("t", "t@e", 0, 0)
    evil = git.create_commit(None, sig, sig, "crafted\n", pygit2.Oid(raw=root), list(commit.parent_ids))
    refs.update_branch(git, "evil", str(evil), None, "test: crafted")
    return str(evil), evil_world.hex()


def _marks(repo: Repo) -> set[str]:
    path = Path(repo.git.path) / "pf" / "sound-trees"
    return set(path.read_text().split()) if path.exists() else set()


@pytest.mark.parametrize("variant", ["dotdot", "dot-git", "slash", "unsorted", "duplicate", "escaped-alias",
                                     "dot-git-dir"])
def test_first_merge_refuses_an_unsafe_name_deep_in_theirs(tmp_path, variant):
    repo, ours, theirs = _setup(tmp_path)
    repo.merge("side", into="main")  # ours, theirs and their merge are found sound and marked
    refs.update_branch(repo.git, "main", ours, refs.branch_tip(repo.git, "main"), "test: back to ours")
    evil, evil_world = _evil_from(repo, theirs, variant)
    for first in (True, False):  # no mark at all; and with ours' and the sound theirs' worlds marked
        if first:
            _forget_marks(repo)
        else:
            safepath.forget_sound_trees()
        with pytest.raises(DataError) as e:
            repo.merge("evil", into="main")
        assert f"image {evil[:12]}" in e.value.message and "deep" in e.value.message, e.value.message
        assert refs.branch_tip(repo.git, "main") == ours
        assert evil_world not in _marks(repo)
    assert repo.merge("side", into="main").status == "merged"  # the sound merge still goes through


def test_first_merge_marks_the_sides_and_the_result(tmp_path):
    repo, ours, theirs = _setup(tmp_path)
    _forget_marks(repo)
    result = repo.merge("side", into="main")
    assert result.status == "merged"
    worlds = {str(repo.git.revparse_single(f"{c}:world/fs").id) for c in (ours, theirs, result.image.id)}
    assert worlds <= _marks(repo)


def _git(repo: Repo, *args: str, data: bytes | None = None) -> str:
    return subprocess.run(["git", "--git-dir", str(repo.git_dir), *args], input=data, capture_output=True,
                          check=True).stdout.decode().strip()


def test_a_snapshot_marks_the_world_it_built_and_a_first_merge_does_not_walk_the_sides(tmp_path):
    repo, ours, theirs = _setup(tmp_path)
    worlds = {str(repo.git.revparse_single(f"{c}:world/fs").id) for c in (ours, theirs)}
    assert worlds <= _marks(repo)  # marked by the snapshots that built them, before any merge
    size = (Path(repo.git.path) / "pf" / "sound-trees").stat().st_size
    repo.snapshot(tmp_path / "sb", name="side", message="the same world again")
    assert (Path(repo.git.path) / "pf" / "sound-trees").stat().st_size == size  # an unchanged world: no line
    safepath.forget_sound_trees()  # as a fresh process: only the marks on disk
    assert repo.merge("side", into="main").status == "merged"
    theirs_deep = repo.git.revparse_single(f"{theirs}:world/fs/pkg/sub/deep").id.raw
    assert theirs_deep not in safepath._SHAPES  # theirs' world was not walked: its mark vouched for it
    # (only its trees above the directory both sides changed are read, as counterparts of the result's)


def test_a_crafted_image_with_an_unsafe_name_deep_inside_gets_no_mark_and_is_refused(tmp_path):
    """Made with git's plumbing alone, on top of snapshotted (marked) worlds: the unsafe tree's
    parents keep every name of theirs' world, so only reading it finds the '..'."""
    repo, ours, theirs = _setup(tmp_path)
    marked = _marks(repo)
    deep = _git(repo, "rev-parse", f"{theirs}:world/fs/{DEEP.decode()}")
    bad = _hostile_deep(repo.git, bytes.fromhex(deep), "dotdot")
    tree = _git(repo, "hash-object", "-t", "tree", "-w", "--literally", "--stdin", data=bad)
    path = f"world/fs/{DEEP.decode()}"
    while path:  # each tree above it: theirs' listing with the one changed subtree, through mktree
        parent, _, name = path.rpartition("/")
        lines = [line.split(" ")[0] + f" tree {tree}\t{name}" if line.endswith(f"\t{name}") else line
                 for line in _git(repo, "ls-tree", f"{theirs}:{parent}").splitlines()]
        tree = _git(repo, "mktree", data=("\n".join(lines) + "\n").encode())
        path = parent
    commit = _git(repo, "commit-tree", tree, "-p", _git(repo, "rev-parse", f"{theirs}^"), "-m", "crafted")
    _git(repo, "update-ref", "refs/pf/heads/evil", commit)
    evil_world = _git(repo, "rev-parse", f"{commit}:world/fs")
    for fresh in (True, False):
        if fresh:
            safepath.forget_sound_trees()
        with pytest.raises(DataError) as e:
            repo.merge("evil", into="main")
        assert f"image {commit[:12]}" in e.value.message and "deep" in e.value.message, e.value.message
        assert refs.branch_tip(repo.git, "main") == ours
        assert evil_world not in _marks(repo) and _marks(repo) == marked
    assert repo.merge("side", into="main").status == "merged"


def test_what_a_snapshot_marks_passes_every_check(tmp_path):
    """Names a sandbox may hold that the rules care about: the world a snapshot marks without
    reading it is one the full checks (no mark trusted) accept, names unescaped as they were."""
    sb = tmp_path / "sb"
    names = [".git", ".GIT", ".Git", ".pf-esc-x", ".pf-esc-.git", "..x", ".x", "a b", "-n", "é", "new\nline",
             "back\\slash", "x~1", "~"]
    for name in names:
        (sb / "d" / name).mkdir(parents=True)
        (sb / "d" / name / name).write_text(name)
    (sb / ".pf-esc-").write_text("prefix alone")
    repo, _ = Repo.init(tmp_path / "repo")
    image = repo.snapshot(sb, name="main").image
    world = str(repo.git.revparse_single(f"{image.id}:world/fs").id)
    assert world in _marks(repo)
    assert safepath.world_problems(repo.git, image.tree) == []  # every tree read, no mark trusted
    listed = {p for p, _, _ in safepath.validate_image(repo.git, image.tree).entries}
    assert listed == {f"d/{n}/{n}".encode() for n in names} | {b".pf-esc-"}


def _tree_at(repo: Repo, image: str, path: str) -> bytes:
    return repo.git.revparse_single(f"{image}:world/fs{path}").id.raw


@pytest.mark.parametrize("by_git", [True, False])
def test_a_result_subtree_that_theirs_holds_is_not_read_and_one_no_side_holds_is(tmp_path, by_git):
    """git's merged world is checked against both sides: a directory only theirs changed is
    theirs' tree (marked by its snapshot), so it is not read; a directory both sides changed is
    a tree neither side has, and it is read and checked. A world merged path-wise without git
    (no deletion where both sides changed: ``merge.pathwise``) is built of both sides' checked
    entries, so nothing of it is read, and it is marked sound."""
    sb = tmp_path / "sb"
    repo, ours, theirs = _setup(tmp_path)
    (sb / "extra").mkdir()  # a directory only theirs has
    (sb / "extra/a.py").write_text("# theirs alone\n")
    (sb / "pkg/sub/deep/new.py").write_text("# theirs adds\n")
    if by_git:  # a deletion in a directory both sides changed: git merges
        (sb / "pkg/sub/deep/m06.py").unlink()
    theirs = repo.snapshot(sb, name="side", message="theirs again").image.id
    safepath.forget_sound_trees()  # as a fresh process: only the snapshots' marks on disk
    result = repo.merge("side", into="main")
    assert result.status == "merged"
    merged = result.image.id
    deep = _tree_at(repo, merged, "/pkg/sub/deep")
    assert deep not in {_tree_at(repo, s, "/pkg/sub/deep") for s in (ours, theirs)}
    assert (deep in safepath._SHAPES) == by_git  # neither side has it: read and checked, or built of theirs'
    assert _tree_at(repo, merged, "/extra") == _tree_at(repo, theirs, "/extra")
    assert _tree_at(repo, merged, "/extra") not in safepath._SHAPES  # theirs' tree: its mark vouched for it
    assert _tree_at(repo, merged, "").hex() in _marks(repo)
    assert (result.layers[0].detail["ours"] is not None) == by_git


def test_a_result_tree_no_side_holds_is_still_refused_and_an_unchecked_side_vouches_for_nothing(tmp_path):
    """The merged world's check trusts a side's tree only at the same path, and only a side found
    sound or marked: a result holding a '..' in a directory no side has is refused, and a side
    world that was never checked (crafted, holding the same bad tree) lends it nothing."""
    repo, ours, theirs = _setup(tmp_path)
    safepath.forget_sound_trees()
    git = repo.git
    deep = _tree_at(repo, theirs, "/pkg/sub/deep")
    ours_world, theirs_world = (_tree_at(repo, c, "").hex() for c in (ours, theirs))
    for variant in ("dotdot", "dot-git", "unsorted", "duplicate", "escaped-alias", "dot-git-dir"):
        evil = _replace_deep(git, bytes.fromhex(theirs_world), DEEP, _hostile_deep(git, deep, variant)).hex()
        with pytest.raises(DataError) as e:
            safepath.check_tree(git, evil, likes=(ours_world, theirs_world))
        assert "deep" in e.value.message, e.value.message
        with pytest.raises(DataError):  # the crafted world itself, unchecked, vouches for nothing
            safepath.check_tree(git, evil, likes=(evil, ours_world))
        assert evil not in _marks(repo)
    # a directory/file swap git's merge could make: a file where a side had a directory, and a
    # directory (holding a bad name) where a side had a file
    top = _tree_at(repo, theirs, "")
    entries = read_tree(git, top)
    bad_dir = git.odb.write(pygit2.enums.ObjectType.TREE, _raw([(b"..", 0o100644, entries[-1][2])])).raw
    swapped = [(b"pkg", 0o100644, entries[-1][2]) if n == b"pkg" else
               (b"top.txt", MODE_TREE, bad_dir) if n == b"top.txt" else (n, m, o) for n, m, o in entries]
    evil = git.odb.write(pygit2.enums.ObjectType.TREE, _raw(swapped)).raw.hex()
    with pytest.raises(DataError) as e:
        safepath.check_tree(git, evil, likes=(ours_world, theirs_world))
    assert "top.txt/.." in e.value.message, e.value.message
