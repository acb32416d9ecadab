"""Images crafted with plain git plumbing never make checkout, merge or mount write outside
their target: each is refused (exit 3, one line naming the bad path) before anything is written.

The repositories here are made without the ``repo`` fixture: its ``git fsck --strict``
rightly rejects the hostile trees these tests build on purpose.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import time
from pathlib import Path

import pygit2
import pytest

from git_pf import Repo

from mount_helpers import Pf, requires_fuse

BLOB, TREE = pygit2.enums.ObjectType.BLOB, pygit2.enums.ObjectType.TREE
FILE, LINK, DIR = 0o100644, 0o120000, 0o040000
ENV = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t",
           GIT_COMMITTER_EMAIL="t@e")


# -- building hostile images ------------------------------------------------------------
def blob(git: pygit2.Repository, data: bytes) -> bytes:
    return git.odb.write(BLOB, data).raw


def tree(git: pygit2.Repository, entries: list[tuple[bytes, int, bytes]]) -> bytes:
    """A raw tree object holding exactly ``entries``, in the order given (duplicates kept)."""
    return git.odb.write(TREE, b"".join(b"%o %s\0%s" % (m, n, o) for n, m, o in entries)).raw


def put(git, base: bytes, path: bytes, mode: int, oid: bytes) -> bytes:
    """``base`` (raw tree id) with ``path`` set; every other entry kept."""
    head, _, rest = path.partition(b"/")
    entries = {n: (m, o) for n, m, o in _entries(git, base)}
    if rest:
        sub = entries.get(head)
        oid, mode = put(git, sub[1] if sub else tree(git, []), rest, mode, oid), DIR
    entries[head] = (mode, oid)
    return tree(git, sorted(((n, m, o) for n, (m, o) in entries.items()), key=lambda e: e[0] + (b"/" if e[1] == DIR else b"")))


def _entries(git, raw: bytes):
    for e in git[pygit2.Oid(raw=raw)]:
        yield e.name.encode("utf-8", "surrogateescape"), e.filemode, e.id.raw


def plumb(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env=ENV, check=True, capture_output=True, text=True).stdout.strip()


def craft(repo_dir: Path, name: str, fs: list | None = None, attrs: bytes | None = None,
          tape: list | None = None, parent: str = "refs/pf/heads/main") -> str:
    """Commit an image whose world/fs is the raw tree ``fs`` (entries), whose attrs file is ``attrs``
    and whose trace/tape holds ``tape`` (name, data), on top of ``parent``; returns the commit id."""
    git = pygit2.Repository(str(repo_dir))
    base = git.revparse_single(parent).peel(pygit2.Commit)
    root = base.tree.id.raw
    if fs is not None:
        root = put(git, root, b"world/fs", DIR, tree(git, fs))
    if attrs is not None:
        root = put(git, root, b"world/fs.attrs.jsonl", FILE, blob(git, attrs))
    if tape is not None:
        root = put(git, root, b"trace/tape", DIR, tree(git, [(n, FILE, blob(git, d)) for n, d in tape]))
    commit = plumb(repo_dir, "commit-tree", root.hex(), "-p", str(base.id), "-m", "crafted")
    plumb(repo_dir, "update-ref", f"refs/pf/heads/{name}", commit)
    return commit


def file_entry(git_dir: Path, name: bytes, data: bytes = b"x\n") -> tuple[bytes, int, bytes]:
    return name, FILE, blob(pygit2.Repository(str(git_dir)), data)


def link_entry(git_dir: Path, name: bytes, target: bytes) -> tuple[bytes, int, bytes]:
    return name, LINK, blob(pygit2.Repository(str(git_dir)), target)


def dir_entry(git_dir: Path, name: bytes, entries: list) -> tuple[bytes, int, bytes]:
    return name, DIR, tree(pygit2.Repository(str(git_dir)), entries)


# -- what must not change ---------------------------------------------------------------
def listing(root: Path) -> dict[str, tuple]:
    """Every path under ``root`` (not following symlinks) with its kind, mode and content."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            st = p.lstat()
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", st.st_mode)
            else:
                out[rel] = ("file", st.st_mode, p.read_bytes())
    return out


@pytest.fixture
def world(tmp_path):
    """A repository with one ordinary image on ``main``, and an area holding a victim directory;
    checkouts go to ``area/out``, which must stay absent."""
    sb = tmp_path / "sb"
    (sb / "src").mkdir(parents=True)
    (sb / "src" / "a.txt").write_text("a\n")
    (sb / "shared.txt").write_text("one\ntwo\nthree\n")
    r, _ = Repo.init(tmp_path / "repo")
    r.snapshot(sb, name="main", message="base")
    area = tmp_path / "area"
    (area / "victim").mkdir(parents=True)
    (area / "victim" / "keep.txt").write_text("mine\n")
    return tmp_path / "repo", area


def assert_refused(proc, area: Path, before: dict, *names: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 3, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert all(n in lines[0] for n in names), lines[0]
    assert listing(area) == before
    assert not (area / "out").exists()


def checkout(run_pf, repo_dir: Path, area: Path, rev: str, *extra: str):
    return run_pf("checkout", rev, "--into", area / "out", *extra, cwd=repo_dir, check=False)


# -- 1: a ".." tree entry ---------------------------------------------------------------
def test_case1_dotdot_tree_entry_is_refused(world, run_pf):
    repo_dir, area = world
    craft(repo_dir, "evil", fs=[dir_entry(repo_dir, b"..", [file_entry(repo_dir, b"pwned.txt")])])
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil"), area, before, "'..'")
    assert not (area / "pwned.txt").exists()


# -- 2: attrs paths through a symlink ---------------------------------------------------
@pytest.mark.parametrize("line", [
    b'{"path":"l/newdir","type":"dir"}',
    b'{"mode":"0700","path":"l/keep.txt"}',
    b'{"path":"l/keep.txt","xattrs":{"user.x":"eA=="}}',
    b'{"mode":"0777","path":"l","type":"dir"}',
    b'{"mode":"0700","path":"l"}',
    b'{"path":"l/keep.txt","pointer":true}',
], ids=["dir-under-link", "mode-under-link", "xattr-under-link", "dir-mode-on-link", "mode-on-link", "pointer-under-link"])
def test_case2_attrs_path_through_a_symlink_is_refused(world, run_pf, line):
    repo_dir, area = world
    craft(repo_dir, "evil", fs=[link_entry(repo_dir, b"l", os.fsencode(area / "victim"))], attrs=line + b"\n")
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil"), area, before, "'l")
    assert not (area / "victim" / "newdir").exists()


# -- 3: a raw .git entry ----------------------------------------------------------------
@pytest.mark.parametrize("name", [b".git", b".GiT"])
def test_case3_raw_dot_git_entry_is_refused(world, run_pf, name):
    repo_dir, area = world
    hooks = dir_entry(repo_dir, b"hooks", [(b"post-checkout", 0o100755, blob(pygit2.Repository(str(repo_dir)), b"#!/bin/sh\ntouch /tmp/owned\n"))])
    craft(repo_dir, "evil", fs=[dir_entry(repo_dir, name, [file_entry(repo_dir, b"config", b"[core]\n"), hooks])])
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil"), area, before, name.decode(), "raw .git")


# -- 5: names that alias one another, unescape to "..", hold "/"; bad attrs paths --------
def _case5(repo_dir: Path, area: Path, variant: str):
    victim = os.fsencode(area / "victim")
    passwd = [file_entry(repo_dir, b"passwd", b"root::0:0::/:/bin/sh\n")]
    if variant == "escaped-alias":
        return dict(fs=[link_entry(repo_dir, b".pf-esc-link", victim), dir_entry(repo_dir, b"link", passwd)]), ".pf-esc-link"
    if variant == "duplicate-entry":
        return dict(fs=[link_entry(repo_dir, b"link", victim), dir_entry(repo_dir, b"link", passwd)]), "'link'"
    if variant == "escaped-dotdot":
        return dict(fs=[dir_entry(repo_dir, b".pf-esc-..", [file_entry(repo_dir, b"pwned.txt")])]), ".pf-esc-.."
    if variant == "slash-in-name":
        return dict(fs=[file_entry(repo_dir, b"../victim/passwd")]), "../victim/passwd"
    if variant == "absolute-attrs-path":
        return dict(attrs=b'{"path":"%s/newdir","type":"dir"}\n' % victim), "newdir"
    return dict(attrs=b'{"path":"../victim/newdir","type":"dir"}\n'), "../victim/newdir"


@pytest.mark.parametrize("variant", ["escaped-alias", "duplicate-entry", "escaped-dotdot", "slash-in-name",
                                     "absolute-attrs-path", "dotdot-attrs-path"])
def test_case5_aliasing_and_escaping_names_are_refused(world, run_pf, variant):
    repo_dir, area = world
    spec, shown = _case5(repo_dir, area, variant)
    craft(repo_dir, "evil", **spec)
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil"), area, before, shown)
    assert not (area / "victim" / "passwd").exists()


# -- 6: the .pf sidecar and tape names --------------------------------------------------
def test_case6_world_symlink_named_dot_pf_is_refused_with_other_layers(world, run_pf):
    repo_dir, area = world
    craft(repo_dir, "evil", fs=[link_entry(repo_dir, b".pf", os.fsencode(area / "victim"))])
    before = listing(area)
    proc = checkout(run_pf, repo_dir, area, "evil", "--layers", "world,trace,effects,env")
    assert_refused(proc, area, before, "'.pf'")


def test_case6_tape_entry_climbing_out_of_the_target_is_refused(world, run_pf):
    repo_dir, area = world
    craft(repo_dir, "evil", tape=[(b"../../../../x.json", b"{}")])
    deep = area / "a" / "b"
    deep.mkdir(parents=True)
    before = listing(area)
    proc = run_pf("checkout", "evil", "--layers", "trace", "--into", deep / "out", cwd=repo_dir, check=False)
    assert_refused(proc, area, before, "../../../../x.json")
    assert not (deep / "out").exists()


def test_case6_layer_file_that_is_a_tree_is_absent_to_checkout_as_to_its_reader(world, run_pf):
    repo_dir, area = world
    commit = craft(repo_dir, "evil")
    git = pygit2.Repository(str(repo_dir))
    messages = tree(git, [(b"x", FILE, blob(git, b"not read\n"))])
    root = put(git, git[commit].tree.id.raw, b"trace/messages.jsonl", DIR, messages)
    plumb(repo_dir, "update-ref", "refs/pf/heads/evil", plumb(repo_dir, "commit-tree", root.hex(), "-m", "crafted"))
    proc = run_pf("checkout", "evil", "--layers", "trace", "--into", area / "out", "--json", cwd=repo_dir)
    assert json.loads(proc.stdout)["layer_files"] == []
    assert list((area / "out").iterdir()) == []


# -- 7: merge ---------------------------------------------------------------------------
def _evil_theirs(repo_dir: Path, area: Path) -> str:
    return craft(repo_dir, "evil", fs=[link_entry(repo_dir, b".pf-esc-link", os.fsencode(area / "victim")),
                                       dir_entry(repo_dir, b"link", [file_entry(repo_dir, b"passwd")])])


def test_case7_fast_forward_merge_of_a_hostile_image_is_refused(world, run_pf):
    repo_dir, area = world
    _evil_theirs(repo_dir, area)
    tip = plumb(repo_dir, "rev-parse", "refs/pf/heads/main")
    proc = run_pf("merge", "evil", "--into", "main", cwd=repo_dir, check=False)
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert ".pf-esc-link" in proc.stderr
    assert plumb(repo_dir, "rev-parse", "refs/pf/heads/main") == tip


def test_case7_three_way_merge_and_merge_checkout_of_a_hostile_image_are_refused(world, run_pf, tmp_path):
    repo_dir, area = world
    _evil_theirs(repo_dir, area)
    sb = tmp_path / "sb"
    (sb / "shared.txt").write_text("ONE\ntwo\nthree\n")
    Repo.open(repo_dir).snapshot(sb, name="main", message="ours")
    tip = plumb(repo_dir, "rev-parse", "refs/pf/heads/main")
    before = listing(area)
    for extra in ((), ("--checkout", str(area / "out"))):
        proc = run_pf("merge", "evil", "--into", "main", *extra, cwd=repo_dir, check=False)
        assert_refused(proc, area, before, ".pf-esc-link")
        assert plumb(repo_dir, "rev-parse", "refs/pf/heads/main") == tip


def _sound_marks(repo_dir: Path) -> list[str]:
    path = repo_dir / ".git" / "pf" / "sound-trees"
    return path.read_text().splitlines() if path.exists() else []


def _world_root(repo_dir: Path, rev: str) -> str:
    return plumb(repo_dir, "rev-parse", f"{rev}:world/fs")


def test_sound_tree_marks_persist_across_merges_and_never_mark_a_hostile_world(world, run_pf, tmp_path):
    repo_dir, area = world
    sb = tmp_path / "sb"
    Repo.open(repo_dir).create_branch("side", "main")
    (sb / "theirs.txt").write_text("t\n")
    Repo.open(repo_dir).snapshot(sb, name="side", message="theirs")
    (sb / "theirs.txt").unlink()
    (sb / "shared.txt").write_text("ONE\ntwo\nthree\n")
    Repo.open(repo_dir).snapshot(sb, name="main", message="ours")
    run_pf("merge", "side", "--into", "main", cwd=repo_dir)
    marks = _sound_marks(repo_dir)
    assert marks[0] == "pf-sound-trees 1"
    assert {_world_root(repo_dir, "refs/pf/heads/side"), _world_root(repo_dir, "refs/pf/heads/main")} <= set(marks)

    evil = _evil_theirs(repo_dir, area)
    before = listing(area)
    assert_refused(run_pf("merge", "evil", "--into", "main", cwd=repo_dir, check=False), area, before, ".pf-esc-link")
    assert _world_root(repo_dir, evil) not in _sound_marks(repo_dir)

    # marks written under other name rules are not read: a stale file naming the hostile world trusts nothing
    (repo_dir / ".git" / "pf" / "sound-trees").write_text(f"pf-sound-trees 0\n{_world_root(repo_dir, evil)}\n")
    assert_refused(run_pf("merge", "evil", "--into", "main", cwd=repo_dir, check=False), area, before, ".pf-esc-link")


def test_gc_drops_sound_tree_marks_of_trees_that_are_gone(world, run_pf):
    repo_dir, _ = world
    main_root = _world_root(repo_dir, "refs/pf/heads/main")
    (repo_dir / ".git" / "pf" / "sound-trees").write_text(f"pf-sound-trees 1\n{main_root}\n{'ab' * 20}\n")
    run_pf("gc", cwd=repo_dir)
    assert _sound_marks(repo_dir) == ["pf-sound-trees 1", main_root]


def test_fsck_reports_a_hostile_world(world, run_pf):
    repo_dir, area = world
    commit = _evil_theirs(repo_dir, area)
    proc = run_pf("fsck", cwd=repo_dir, check=False)
    assert proc.returncode != 0
    assert any(commit[:7] in line and ".pf-esc-link" in line for line in proc.stdout.splitlines() + proc.stderr.splitlines())


# -- leftovers of a killed checkout -----------------------------------------------------
def _killed_checkout(repo_dir: Path, area: Path, tmp_path: Path) -> Path:
    """Start a checkout of a 4,000-file world into area/out, kill it while its temporary
    directory exists; that directory."""
    sb = tmp_path / "big"
    for d in range(40):
        (sb / f"d{d}").mkdir(parents=True)
        for f in range(100):
            (sb / f"d{d}" / f"f{f}").write_text(f"{d} {f}\n")
    Repo.open(repo_dir).snapshot(sb, name="big", message="big")
    proc = subprocess.Popen(["git-pf", "checkout", "big", "--into", str(area / "out")], cwd=repo_dir,
                            env=dict(ENV, PATH=f"{Path(os.sys.executable).parent}:{os.environ['PATH']}"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [n for n in os.listdir(area) if n.startswith(".out.pf-checkout-")]
        if left and any(os.scandir(area / left[0])):
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            if not (area / "out").exists():
                return area / left[0]
        time.sleep(0.001)
    pytest.fail("the checkout finished before it could be killed")


def test_leftover_of_a_killed_checkout_is_removed_by_the_next_checkout(world, run_pf, tmp_path):
    repo_dir, area = world
    left = _killed_checkout(repo_dir, area, tmp_path)
    assert left.is_dir()
    alive = area / f".out.pf-checkout-{os.getpid()}-inflight"  # a running checkout's directory stays
    alive.mkdir()
    run_pf("checkout", "main", "--into", area / "out", cwd=repo_dir)
    assert not left.exists() and alive.is_dir()
    assert sorted(os.listdir(area)) == sorted([".out.pf-checkout-%d-inflight" % os.getpid(), "out", "victim"])


def test_leftover_whose_pid_was_reused_by_a_later_process_is_removed(world, run_pf, tmp_path):
    repo_dir, area = world
    later = subprocess.Popen(["sleep", "60"])  # a live process that started after the leftover was made
    try:
        left = area / f".out.pf-checkout-{later.pid}-old"
        (left / "d").mkdir(parents=True)
        os.utime(left, (time.time() - 3600, time.time() - 3600))
        run_pf("checkout", "main", "--into", area / "out", cwd=repo_dir)
        assert not left.exists()
    finally:
        later.kill()
        later.wait()


def test_leftover_of_a_killed_checkout_is_removed_by_gc(world, run_pf, tmp_path):
    repo_dir, area = world
    left = _killed_checkout(repo_dir, area, tmp_path)
    run_pf("gc", cwd=repo_dir)
    assert not left.exists()
    assert sorted(os.listdir(area)) == ["victim"]
    assert not list((repo_dir / ".git" / "pf" / "scratch").iterdir())


def test_checkout_and_merge_checkout_targets_get_the_mode_of_the_umask(world, run_pf, tmp_path):
    """The temporary sibling renamed into place becomes the target: its mode is mkdir's, not mkdtemp's 0700."""
    repo_dir, area = world
    r, sb = Repo.open(repo_dir), tmp_path / "sb"
    r.create_branch("rival", "main")
    (sb / "shared.txt").write_text("ONE\ntwo\nthree\n")
    r.snapshot(sb, name="main", message="ours")
    (sb / "shared.txt").write_text("uno\ntwo\nthree\n")
    r.snapshot(sb, name="rival", message="theirs")
    old = os.umask(0o027)
    try:
        run_pf("checkout", "main", "--into", area / "out", cwd=repo_dir)
        proc = run_pf("merge", "rival", "--into", "main", "--checkout", area / "mrg", cwd=repo_dir, check=False)
    finally:
        os.umask(old)
    assert proc.returncode == 1, proc.stderr  # a conflict, left in area/mrg
    assert [stat.S_IMODE(os.stat(area / d).st_mode) for d in ("out", "mrg")] == [0o750, 0o750]


# -- the mount --------------------------------------------------------------------------
@requires_fuse
def test_mount_leaves_out_a_tree_name_holding_a_slash(tmp_path, world):
    repo_dir, area = world
    craft(repo_dir, "evil", fs=[file_entry(repo_dir, b"a/b", b"hidden\n"), file_entry(repo_dir, b"ok.txt", b"ok\n"),
                                dir_entry(repo_dir, b"..", [file_entry(repo_dir, b"pwned.txt")])])
    pf = Pf(tmp_path)
    pf.repo = repo_dir
    try:
        mnt = pf.mount("evil", tmp_path / "mnt")
        assert sorted(os.listdir(mnt)) == ["ok.txt"]  # no EIO, and nothing unsafe listed
        assert (mnt / "ok.txt").read_text() == "ok\n"
        assert not (mnt / "a").exists()
    finally:
        pf.cleanup()


# -- found by tests/test_hostile_property.py ---------------------------------------------
@pytest.mark.parametrize("extra", [(), ("--layers", "world,trace,effects,env")], ids=["world", "all-layers"])
def test_nul_in_a_tree_name_is_refused_not_a_crash(world, run_pf, extra):
    """A NUL inside a raw tree name shifts the mode and oid of every entry after it: the tree is malformed."""
    repo_dir, area = world
    craft(repo_dir, "evil", fs=[file_entry(repo_dir, b"n\0ul")])
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil", *extra), area, before, "tree", "malformed")
    proc = run_pf("merge", "evil", "--into", "main", cwd=repo_dir, check=False)
    assert proc.returncode == 3 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_unsorted_world_tree_is_refused_before_git_merges_it(world, run_pf, tmp_path):
    """git's merge-ort aborts on a tree whose entries are out of order; such a tree is damaged data."""
    repo_dir, area = world
    shared = file_entry(repo_dir, b"shared.txt", b"uno\ntwo\nthree\n")
    craft(repo_dir, "evil", fs=[file_entry(repo_dir, b"x"), shared])
    sb = tmp_path / "sb"
    (sb / "shared.txt").write_text("ONE\ntwo\nthree\n")
    Repo.open(repo_dir).snapshot(sb, name="main", message="ours")
    tip = plumb(repo_dir, "rev-parse", "refs/pf/heads/main")
    before = listing(area)
    assert_refused(checkout(run_pf, repo_dir, area, "evil"), area, before, "'shared.txt'", "order")
    for extra in ((), ("--checkout", str(area / "out"))):
        proc = run_pf("merge", "evil", "--into", "main", *extra, cwd=repo_dir, check=False)
        assert_refused(proc, area, before, "'shared.txt'", "order")
        assert plumb(repo_dir, "rev-parse", "refs/pf/heads/main") == tip


@requires_fuse
def test_mount_of_an_image_with_malformed_attrs_is_a_data_error(tmp_path, world):
    """The daemon's DataError reaches the user as exit 3 (damaged data), not exit 2 (bad input)."""
    repo_dir, area = world
    craft(repo_dir, "evil", attrs=b'{"path":""}\n')
    pf = Pf(tmp_path)
    pf.repo = repo_dir
    (area / "mnt").mkdir()
    before = listing(area)
    try:
        pf.mountpoints.add(str(area / "mnt"))
        proc = pf.run("mount", "evil", str(area / "mnt"), check=False)
        assert proc.returncode == 3, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and "world/fs.attrs.jsonl:1" in proc.stderr, proc.stderr
        assert not os.path.ismount(area / "mnt") and listing(area) == before
    finally:
        pf.cleanup()


def test_a_subtree_found_sound_elsewhere_does_not_hide_a_bad_sibling_from_a_merge(world, run_pf):
    """Merges check worlds through a cache of sound trees: a shared sound subtree is skipped,
    the hostile entry next to it is still refused, in both directions."""
    repo_dir, area = world
    git = pygit2.Repository(str(repo_dir))
    sound = dir_entry(repo_dir, b"src", [file_entry(repo_dir, b"a.txt", b"a\n")])
    hostile = craft(repo_dir, "hostile", fs=[dir_entry(repo_dir, b"..", [file_entry(repo_dir, b"pwned.txt")]), sound])
    assert git[hostile]  # the hostile image shares src/ with main
    before = listing(area)
    for args in (["merge", "hostile", "--into", "main"], ["merge", "main", "--into", "hostile"]):
        proc = run_pf(*args, cwd=repo_dir, check=False)
        assert proc.returncode == 3 and "'..'" in proc.stderr, proc.stderr
    assert listing(area) == before
    assert plumb(repo_dir, "rev-parse", "refs/pf/heads/hostile") == hostile


def test_a_world_nested_deeper_than_the_recursion_limit_is_checked_not_crashed(world, run_pf):
    repo_dir, area = world
    git = pygit2.Repository(str(repo_dir))
    entry = (b"f", FILE, blob(git, b"deep\n"))
    for _ in range(1500):
        entry = (b"d", DIR, tree(git, [entry]))
    craft(repo_dir, "deep", fs=[entry])
    for args in (["fsck"], ["merge", "deep", "--into", "main", "--dry-run"]):
        proc = run_pf(*args, cwd=repo_dir, check=False)
        assert "Traceback" not in proc.stderr and proc.returncode in (0, 1), (args, proc.stderr[-500:])
