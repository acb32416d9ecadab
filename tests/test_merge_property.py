"""Property: the merged world equals ``git merge-tree --write-tree`` run on plain commits
holding the same three trees (clean or not, and the same conflicted paths)."""
from __future__ import annotations

import itertools
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st

from git_pf import Repo
from merge_helpers import PlainRepo, conflicted_paths, snap, world

NAMES = ["a.txt", "b.txt", "d/c.txt", "d/e.txt", "bin.dat", "x/y/z.txt"]
BODY = [f"l{i}\n" for i in range(8)]


@st.composite
def contents(draw):
    if draw(st.booleans()):
        lines = list(BODY)
        for i in draw(st.lists(st.integers(0, 7), max_size=3)):
            lines[i] = draw(st.sampled_from(["X\n", "Y\n", "Z\n"]))
        return "".join(lines)
    return draw(st.sampled_from([b"\x00bin1", b"\x00bin2", "short\n"]))


@st.composite
def worlds(draw, base=None):
    if base is None:
        return {n: draw(contents()) for n in draw(st.sets(st.sampled_from(NAMES), min_size=1))}
    out = dict(base)
    for name in draw(st.lists(st.sampled_from(NAMES), min_size=1, max_size=4)):
        action = draw(st.sampled_from(["edit", "edit", "edit", "delete", "exec", "rename"]))
        if action == "delete":
            out.pop(name, None)
        elif action == "exec" and name in out:
            out[name + "*"] = out.pop(name)
        elif action == "rename" and name in out:
            out[draw(st.sampled_from(["r1.txt", "d/r2.txt"]))] = out.pop(name)
        else:
            out.pop(name + "*", None)
            out[name] = draw(contents())
    return out


def _no_clash(w: dict) -> bool:
    names = {n.rstrip("*") for n in w}
    return len(names) == len(w) and not any(n.startswith(m + "/") for n, m in itertools.permutations(names, 2))


@st.composite
def triples(draw):
    base = draw(worlds())
    return base, draw(worlds(base)), draw(worlds(base))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(triples())
def test_world_merge_equals_git_merge_tree(three):
    base, ours, theirs = three
    if not all(_no_clash(w) for w in three):
        return
    with tempfile.TemporaryDirectory() as d:
        repo, _ = Repo.init(Path(d) / "repo")
        b = snap(repo, "main", base)
        repo.create_branch("side", b.id)
        snap(repo, "main", ours)
        snap(repo, "side", theirs)
        result = repo.merge("side", into="main", prefer=None, no_ff=True)
        plain = PlainRepo(Path(d) / "plain")
        pb = plain.commit(base, [])
        clean, tree, paths = plain.merge_tree(plain.commit(ours, [pb]), plain.commit(theirs, [pb]))
        if result.status == "up-to-date":
            assert ours == theirs or ours == base or clean
            return
        world_layer = next(r for r in result.layers if r.layer == "world")
        assert world_layer.clean == clean
        if clean:
            merged = world_layer.changes.get(b"world/fs")
            expected = merged[1].hex() if merged else world(repo, repo.resolve("main" if result.image is None else result.image.id))
            assert expected == tree
        else:
            staged = {s.path.decode() for s in world_layer.detail["merge"].stages}
            assert staged == paths
            assert conflicted_paths(result) <= paths | {p.rstrip("*") for p in ours} | {p.rstrip("*") for p in theirs}
