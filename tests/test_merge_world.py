"""The world layer merges as git merges trees: a fork merged back after its parent moved on,
renames against edits, criss-cross histories, binary and large-file conflicts, exec bits."""
from __future__ import annotations

import os
import subprocess

from git_pf.image import manifest as img
from merge_helpers import PlainRepo, conflicted_paths, snap, world

LINES = "".join(f"line {i}\n" for i in range(1, 21))


def _edit(text: str, n: int, new: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[n - 1] = new + "\n"
    return "".join(lines)


def test_fork_merged_back_after_parent_moved_on(repo, tmp_path):
    base = snap(repo, "main", {"src/app.py": LINES, "run.sh*": "#!/bin/sh\n", "notes.txt": "a\n"},
                messages=[{"role": "user", "content": "fix the bug"}], env={"PATH": "/bin", "MODE": "dev"})
    fork = repo.fork("main", 1)[0].name
    ours = snap(repo, "main", {"src/app.py": _edit(LINES, 3, "ours 3"), "run.sh*": "#!/bin/sh\n", "notes.txt": "a\n",
                               "ours.txt": "o\n"},
                messages=[{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "parent moved"}],
                env={"PATH": "/bin", "MODE": "dev", "OURS": "1"})
    theirs = snap(repo, fork, {"src/app.py": _edit(LINES, 17, "theirs 17"), "run.sh": "#!/bin/sh\necho\n",
                               "notes.txt": "a\n", "theirs.txt": "t\n"},
                  messages=[{"role": "user", "content": "fix the bug"}, {"role": "assistant", "content": "fixed it"}],
                  env={"PATH": "/bin", "MODE": "prod"})
    repo.switch("main")
    result = repo.merge(fork)
    assert result.status == "merged" and result.clean
    merged = result.image
    assert merged.parents == (ours.id, theirs.id)
    assert repo.resolve("main").id == merged.id
    app = repo.read_layer("main", "world/fs/src/app.py").decode()
    assert "ours 3\n" in app and "theirs 17\n" in app
    fs = img.subtree(repo.git, merged.tree, img.WORLD_FS)
    entries = {e.name: e.filemode for e in repo.git[fs]}
    assert entries["run.sh"] == 0o100644  # theirs cleared the exec bit; ours left it alone
    assert {"ours.txt", "theirs.txt"} <= set(entries)
    # the merged world is byte-for-byte what git merges from the same commits
    plain = PlainRepo(tmp_path / "plain")
    b = plain.commit({"src/app.py": LINES, "run.sh*": "#!/bin/sh\n", "notes.txt": "a\n"}, [])
    o = plain.commit({"src/app.py": _edit(LINES, 3, "ours 3"), "run.sh*": "#!/bin/sh\n", "notes.txt": "a\n",
                      "ours.txt": "o\n"}, [b])
    t = plain.commit({"src/app.py": _edit(LINES, 17, "theirs 17"), "run.sh": "#!/bin/sh\necho\n", "notes.txt": "a\n",
                      "theirs.txt": "t\n"}, [b])
    clean, tree, _ = plain.merge_tree(o, t)
    assert clean and world(repo, merged) == tree
    # every layer left a Pf-Merge trailer; the manifest counts the merged world
    assert [v.split()[0] for v in merged.trailer("Pf-Merge")] == ["world", "env", "trace", "effects"]
    assert merged.manifest["layers"]["world"]["files"] == 5
    assert merged.manifest["layers"]["world"]["bytes"] == sum(len(repo.git[e.id].data) for e in _walk(repo, fs))
    env = repo.read_layer("main", "world/env.json").decode()
    assert '"MODE":"prod"' in env and '"OURS":"1"' in env


def _walk(repo, tree_hex):
    for e in repo.git[tree_hex]:
        if e.type_str == "tree":
            yield from _walk(repo, str(e.id))
        else:
            yield e


def test_rename_on_one_side_with_edits_on_the_other(repo, tmp_path):
    files = {"lib/util.py": LINES, "README": "r\n"}
    base = snap(repo, "main", files)
    repo.create_branch("side", base.id)
    snap(repo, "main", {"lib/helpers.py": LINES, "README": "r\n"})  # ours renames
    snap(repo, "side", {"lib/util.py": _edit(LINES, 10, "edited on theirs"), "README": "r\n"})
    result = repo.merge("side", into="main")
    assert result.clean, result.layers[0].conflicts
    assert repo.read_layer("main", "world/fs/lib/util.py") is None
    assert "edited on theirs" in repo.read_layer("main", "world/fs/lib/helpers.py").decode()


def test_criss_cross_merges_through_gits_virtual_base(repo, tmp_path):
    """Two merge bases: the world equals git merge-tree on plain commits of the same shape."""
    w0 = {"f.txt": LINES, "g.txt": "g\n"}
    wa = {"f.txt": _edit(LINES, 2, "A2"), "g.txt": "g\n"}
    wb = {"f.txt": _edit(LINES, 19, "B19"), "g.txt": "g\nb\n"}
    root = snap(repo, "main", w0)
    repo.create_branch("fork", root.id)
    a = snap(repo, "main", wa)
    b = snap(repo, "fork", wb)
    # criss-cross: each side merges the other's tip (a and b become the two merge bases)
    m1 = repo.merge(b.id, into="main", prefer={"world": "ours"}).image
    m2 = repo.merge(a.id, into="fork", prefer={"world": "ours"}).image
    wc = dict(wa, **{"c.txt": "c\n", "f.txt": _edit(_edit(LINES, 2, "A2"), 10, "C10")})
    wd = dict(wb, **{"d.txt": "d\n"})
    c = snap(repo, "main", wc)
    d = snap(repo, "fork", wd)
    result = repo.merge("fork", into="main")
    assert sorted(result.bases) == sorted([a.id, b.id])
    assert result.clean
    # the virtual base (a and b merged) holds g.txt with "b": d kept it, c dropped it, so it goes;
    # a merge from either single base would have kept it
    assert repo.read_layer("main", "world/fs/g.txt") == b"g\n"

    plain = PlainRepo(tmp_path / "plain")
    date = lambda image: f"{image.time} +0000"  # noqa: E731
    pr = plain.commit(w0, [], date(root))
    pa, pb = plain.commit(wa, [pr], date(a)), plain.commit(wb, [pr], date(b))
    pm1, pm2 = plain.commit(wa, [pa, pb], date(m1)), plain.commit(wb, [pb, pa], date(m2))
    pc, pd = plain.commit(wc, [pm1], date(c)), plain.commit(wd, [pm2], date(d))
    assert sorted(plain.merge_tree(pc, pd)[2]) == sorted(conflicted_paths(result))
    clean, tree, _ = plain.merge_tree(pc, pd)
    assert clean == result.clean
    if clean:
        assert world(repo, result.image) == tree
    else:
        ours_stages = sorted(_stage_lines(result))
        assert ours_stages == sorted(plain.stages(pc, pd))


def _stage_lines(result):
    world = next(r for r in result.layers if r.layer == "world")
    return [f"{s.mode:06o} {s.oid} {s.stage}\t{s.path.decode()}" for s in world.detail["merge"].stages]


def test_binary_changed_on_both_sides_is_a_conflict_and_writes_nothing(repo):
    base = snap(repo, "main", {"img.bin": b"\x00\x01base", "t.txt": "t\n"})
    repo.create_branch("side", base.id)
    ours = snap(repo, "main", {"img.bin": b"\x00\x01ours", "t.txt": "t\n"})
    snap(repo, "side", {"img.bin": b"\x00\x01theirs", "t.txt": "t\n"})
    refs_before = repo.refs()
    result = repo.merge("side", into="main")
    assert result.status == "conflict" and result.image is None
    assert conflicted_paths(result) == {"img.bin"}
    assert repo.resolve("main").id == ours.id and repo.refs() == refs_before


def test_large_file_pointers_changed_differently_conflict(repo):
    subprocess.run(["git", "config", "pf.largeFileThreshold", "64"], cwd=repo.git_dir, check=True)
    big = lambda tag: (tag * 100).encode()  # noqa: E731  over the threshold: stored as a pointer
    base = snap(repo, "main", {"model.bin": big("b"), "x.txt": "x\n"})
    repo.create_branch("side", base.id)
    snap(repo, "main", {"model.bin": big("o"), "x.txt": "x\n"})
    snap(repo, "side", {"model.bin": big("t"), "x.txt": "x\ny\n"})
    result = repo.merge("side", into="main")
    kinds = {c["path"]: c["kind"] for c in result.layers[0].report["conflicts"]}
    assert kinds == {"model.bin": "pointer"}
    # checked out for resolution: ours' large file at the path, theirs' beside it, both restored in full
    fix = repo.git_dir.parent.parent / "fix"
    assert repo.merge("side", into="main", checkout=fix).checkout == str(fix)
    assert (fix / "model.bin").read_bytes() == big("o") and (fix / "model.bin~theirs").read_bytes() == big("t")
    assert (fix / "x.txt").read_text() == "x\ny\n"
    repo.merge_abort(fix)
    # one side changing the large file merges cleanly and keeps it a pointer
    repo.create_branch("side2", base.id)
    snap(repo, "side2", {"model.bin": big("b"), "x.txt": "x\nz\n"})
    ok = repo.merge("side2", into="main")
    assert ok.clean
    attrs = repo.read_layer("main", "world/fs.attrs.jsonl").decode()
    assert '"path":"model.bin"' in attrs and '"pointer":true' in attrs
    assert ok.image.manifest["layers"]["world"]["pointers"] == 1


def test_attrs_merge_key_wise(repo, tmp_path):
    base = snap(repo, "main", {"a.txt": "a\n", "b.txt": "b\n"})
    repo.create_branch("side", base.id)
    sb = tmp_path / "sb"
    from merge_helpers import write_world
    write_world(sb, {"a.txt": "a\n", "b.txt": "b\n"})
    os.chmod(sb / "a.txt", 0o600)
    ours = repo.snapshot(sb, name="main").image
    write_world(sb, {"a.txt": "a\n", "b.txt": "b\n"})
    (sb / "empty").mkdir()
    os.chmod(sb / "b.txt", 0o640)
    repo.snapshot(sb, name="side")
    result = repo.merge("side", into="main")
    assert result.clean
    attrs = repo.read_layer("main", "world/fs.attrs.jsonl").decode()
    assert '"mode":"0600","path":"a.txt"' in attrs and '"mode":"0640","path":"b.txt"' in attrs
    assert '"path":"empty","type":"dir"' in attrs
    out = tmp_path / "out"
    repo.checkout("main", out)
    assert (out / "empty").is_dir() and (os.stat(out / "a.txt").st_mode & 0o777) == 0o600
    assert ours.id in result.image.parents


def test_a_merge_writes_its_tree_and_its_commit_as_one_pack(repo):
    """A clean merge adds one pack to the repository (its image tree and its commit together),
    not one for each."""
    base = snap(repo, "main", {"a.txt": LINES, "b.txt": LINES})
    repo.create_branch("side", base.id)
    snap(repo, "main", {"a.txt": _edit(LINES, 1, "ours"), "b.txt": LINES})
    snap(repo, "side", {"a.txt": LINES, "b.txt": _edit(LINES, 20, "theirs")})
    packs = lambda: set((repo.git_dir / "objects" / "pack").glob("*.pack"))  # noqa: E731
    before = packs()
    result = repo.merge("side", into="main")
    new = packs() - before
    assert result.status == "merged" and len(new) == 1
    assert bytes.fromhex(result.image.id) in new.pop().with_suffix(".idx").read_bytes()
