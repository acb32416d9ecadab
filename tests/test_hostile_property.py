"""Property: no hostile world makes checkout, mount or merge write outside its target.

Worlds are drawn from an alphabet of dangerous tree names (``..``, ``.``, ``.git`` in two cases, escaped
forms canonical or not, names holding ``/`` or NUL written as raw tree bytes, ``.pf``, duplicates, a
symlink and a directory of one name, trees out of git's order), symlinks (absolute, relative, dangling, into a victim directory
beside the target), ``fs.attrs.jsonl`` lines (absolute, ``..``, through a symlink, directory entries
on files and symlinks, modes and xattrs on symlinks, pointer flags anywhere) and tape entry names.
Each drawn image goes through the real ``git-pf`` CLI: checkout (world, and world with every file
layer), a read-only mount read in full (where FUSE runs), merges of it into a clean branch and of a
clean branch into it, ``merge --checkout`` of a conflicting pair and ``merge --continue``. Nothing
outside the target may change (every path, kind, mode, content and xattr of the target's parent and of
the victim directory, read with lstat) and each command either works or exits 3 with one line.

Each run draws new examples from a fresh seed and prints it (``hostile-world seed: N``);
``PF_PROPERTY_SEED=N`` reruns that draw. ``PF_PROPERTY_EXAMPLES`` sets how many examples a run draws
(default 10: a quick test run; ``make soak`` draws 2000).
"""
from __future__ import annotations

import json
import os
import random
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pygit2
import pytest
from hypothesis import HealthCheck, event, example, given, seed, settings, strategies as st

from git_pf import Repo

from mount_helpers import Pf, describe, fuse_skip_reason
from test_hostile_paths import DIR, FILE, LINK, blob, craft, tree

EXEC = 0o100755
SAFE_NAMES = [b"a", b"b", b"x"]
UNSAFE_NAMES = [b"..", b".", b".GIT", b".git", b".pf-esc-..", b".pf-esc-x", b"a/b", b"../victim/p", b"n\0ul", b""]
ALLOWED = SAFE_NAMES + [b".pf-esc-.git", b".pf", b".pf-esc-.pf-esc-x"]  # odd, but a world may hold them
NAMES = ALLOWED + UNSAFE_NAMES
VICTIM = b"@VICTIM@"  # stands for the victim directory's absolute path
TARGETS = [VICTIM, VICTIM + b"/keep.txt", b"../victim", b"../../victim", b"../../../victim/keep.txt",
           b"dangling", b"/nonexistent/x", b"a", b".", b".."]
MODES = [None, "0700", "0777", "4755"]
rarely = st.sampled_from([False, False, False, True])
TAPE_NAMES = [b"00000001-0123456789abcdef.json", b"..", b"../../x.json", b".pf", b"a/b"]
SHARED = b"shared.txt"  # a file every side holds: the hostile side changes it against the rival's change
EXAMPLES = int(os.environ.get("PF_PROPERTY_EXAMPLES") or 10)
SEED = int(os.environ.get("PF_PROPERTY_SEED") or random.SystemRandom().randrange(1 << 32))


@dataclass(frozen=True)
class Entry:
    name: bytes
    kind: str  # file, exec, link, dir
    payload: object  # bytes (content or link target) or a tuple of Entry


def entries(depth: int, names: list[bytes], unique: bool) -> st.SearchStrategy:
    name = st.sampled_from(names)
    leaf = st.one_of(st.builds(Entry, name, st.sampled_from(["file", "exec"]), st.just(b"x\n")),
                     st.builds(Entry, name, st.just("link"), st.sampled_from(TARGETS)))
    if depth == 0:
        return st.lists(leaf, max_size=3, unique_by=(lambda e: e.name) if unique else None)
    node = st.one_of(leaf, st.builds(Entry, name, st.just("dir"), entries(depth - 1, names, unique).map(tuple)))
    return st.lists(node, max_size=4, unique_by=(lambda e: e.name) if unique else None)


def paths(world: list[Entry], prefix: bytes = b"") -> list[bytes]:
    out = []
    for e in world:
        path = prefix + e.name
        out.append(path)
        if e.kind == "dir":
            out += paths(list(e.payload), path + b"/")
    return out


@st.composite
def hostile_images(draw):
    world = draw(entries(2, NAMES, False) | entries(2, ALLOWED, True))  # half the worlds pass the name checks
    hostile = st.sampled_from([VICTIM + b"/new", b"../victim/new", b"a/new", b"a/b/c", b"..", b".", b"/"])
    path = st.one_of(st.sampled_from(paths(world)), st.sampled_from(paths(world)), hostile) if world else hostile
    attrs = draw(st.just([]) | st.lists(st.fixed_dictionaries({
        "path": path, "dir": rarely, "mode": st.sampled_from(MODES), "xattr": st.booleans(),
        "pointer": rarely}), max_size=2))
    tape = draw(st.just([]) | st.lists(st.sampled_from(TAPE_NAMES), max_size=1))
    return world, attrs, tape, draw(st.sampled_from([True, True, True, False]))  # trees in git's order?


def known_unsafe(world: list[Entry]) -> bool:
    """A name checkout must refuse (exit 3): an unsafe name anywhere, or one name twice in a directory."""
    names = [e.name for e in world]
    return (any(n in UNSAFE_NAMES for n in names) or len(set(names)) < len(names)
            or any(e.kind == "dir" and known_unsafe(list(e.payload)) for e in world))


def plain(world: list[Entry], attrs: list, tape: list) -> bool:
    """Only safe names, each once, and no attrs or tape: checkout must work."""
    names = [e.name for e in world]
    return (not attrs and not tape and len(set(names)) == len(names) and all(n in SAFE_NAMES for n in names)
            and all(plain(list(e.payload), [], []) for e in world if e.kind == "dir"))


# -- writing the drawn image ------------------------------------------------------------
def write_tree(git, world: list[Entry], victim: bytes, sort: bool) -> list[tuple[bytes, int, bytes]]:
    out = []
    for e in world:
        if e.kind == "dir":
            out.append((e.name, DIR, tree(git, write_tree(git, list(e.payload), victim, sort))))
        else:
            data = e.payload.replace(VICTIM, victim)
            out.append((e.name, {"file": FILE, "exec": EXEC, "link": LINK}[e.kind], blob(git, data)))
    if sort:
        out.sort(key=lambda t: t[0] + (b"/" if t[1] == DIR else b""))
    return out


def attrs_line(a: dict, victim: bytes) -> bytes:
    obj = {"path": a["path"].replace(VICTIM, victim).decode("utf-8", "surrogateescape")}
    if a["dir"]:
        obj["type"] = "dir"
    if a["mode"]:
        obj["mode"] = a["mode"]
    if a["xattr"]:
        obj["xattrs"] = {"user.x": "eA=="}
    if a["pointer"]:
        obj["pointer"] = True
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode() + b"\n"


def setup(root: Path, drawn) -> tuple[Path, Path, Path]:
    """A repository with ``main``, ``clean`` (adds a file), ``rival`` (changes shared.txt) and the hostile
    ``evil`` and ``evil2`` on main; the area that receives targets, and the victim directory beside it."""
    world, attrs, tape, sort = drawn
    victim, area = root / "victim", root / "area"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine\n")
    os.chmod(victim / "keep.txt", 0o640)
    area.mkdir()
    (area / "bystander.txt").write_text("here\n")
    sb = root / "sb"
    sb.mkdir()
    (sb / SHARED.decode()).write_text("one\ntwo\nthree\n")
    r, _ = Repo.init(root / "repo")
    r.snapshot(sb, name="main", message="base", messages=[{"role": "user", "content": "hi"}], env={"HOME": "/h"})
    r.create_branch("rival", "main")
    r.create_branch("clean", "main")
    (sb / SHARED.decode()).write_text("ONE\ntwo\nthree\n")
    r.snapshot(sb, name="rival", message="rival")
    (sb / SHARED.decode()).write_text("one\ntwo\nthree\n")
    (sb / "c.txt").write_text("c\n")
    r.snapshot(sb, name="clean", message="clean")
    repo_dir, git = root / "repo", pygit2.Repository(str(root / "repo"))
    vb = os.fsencode(victim)
    fs = write_tree(git, world, vb, sort) + [(SHARED, FILE, blob(git, b"uno\ntwo\nthree\n"))]
    if sort:
        fs.sort(key=lambda t: t[0] + (b"/" if t[1] == DIR else b""))
    craft(repo_dir, "evil", fs=fs, attrs=b"".join(attrs_line(a, vb) for a in attrs),
          tape=[(n, b"{}") for n in tape] or None)
    r.create_branch("evil2", "evil")
    return repo_dir, area, victim


# -- what must not change ---------------------------------------------------------------
def outside(area: Path, victim: Path, targets: tuple[str, ...]) -> tuple:
    """Everything a write outside the targets could change, read without following symlinks."""
    seen = {k: v for k, v in describe(area).items() if k.split(os.sep)[0] not in targets}
    modes = tuple(stat.S_IMODE(os.lstat(p).st_mode) for p in (area, victim))
    return seen, describe(victim), modes


def check(proc, allowed: set[int], what: str) -> int:
    assert "Traceback" not in proc.stderr and proc.returncode != 70, (what, proc.stderr)
    assert proc.returncode in allowed, (what, proc.returncode, proc.stderr)
    if proc.returncode == 3:
        assert len(proc.stderr.strip().splitlines()) == 1, (what, proc.stderr)
    return proc.returncode


def read_all(mnt: Path) -> None:
    """Walk the mount and read every regular file, following no symlink."""
    for base, dirs, files in os.walk(mnt):
        for name in files:
            path = os.path.join(base, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                try:
                    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
                except OSError:
                    continue
                try:
                    while os.read(fd, 1 << 16):
                        pass
                except OSError:  # a file whose content the image does not hold: EIO, nothing written
                    pass
                finally:
                    os.close(fd)


def resolve_by_hand(mrg: Path) -> None:
    """Replace the conflicted shared.txt in a merge checkout, as a user fixing it would."""
    path = mrg / SHARED.decode()
    if stat.S_ISREG(os.lstat(path).st_mode):
        path.write_text("ONE\ntwo\nthree\nuno\n")


def exercise(root: Path, drawn, run_pf) -> None:
    repo_dir, area, victim = setup(root, drawn)
    world, attrs, tape, sort = drawn
    targets = ("out", "out2", "mnt", "mrg")
    before = outside(area, victim, targets)
    unsafe, works = known_unsafe(world), sort and plain(world, attrs, tape)
    expect = {3} if unsafe else {0} if works else {0, 3}

    def run(*args, allowed):
        code = check(run_pf(*args, cwd=repo_dir, check=False), allowed, args)
        event(f"{' '.join(str(a) for a in args if not isinstance(a, Path))}: exit {code}")
        assert outside(area, victim, targets) == before, args
        return code

    run("checkout", "evil", "--into", area / "out", allowed=expect)
    run("checkout", "evil", "--into", area / "out2", "--layers", "world,trace,effects,env", allowed=expect)
    if fuse_skip_reason() is None:
        pf = Pf(root)
        try:
            proc = pf.run("mount", "evil", str(area / "mnt"), check=False)
            pf.mountpoints.add(str(area / "mnt"))
            check(proc, {0, 3}, "mount")
            event(f"mount: exit {proc.returncode}")
            if proc.returncode == 0:
                read_all(area / "mnt")
                assert os.path.ismount(area / "mnt")  # the daemon survived the read
        finally:
            pf.cleanup()
        assert outside(area, victim, targets) == before, "mount"
    run("merge", "evil", "--into", "clean", allowed=expect)
    run("merge", "clean", "--into", "evil2", allowed=expect)
    conflict = {3} if unsafe else {1} if works else {1, 3}  # shared.txt conflicts with the rival's change
    if run("merge", "evil", "--into", "rival", "--checkout", area / "mrg", allowed=conflict) == 1:
        resolve_by_hand(area / "mrg")
        run("merge", "--continue", area / "mrg", allowed={0})  # what it wrote, a snapshot captures
    else:
        assert not (area / "mrg").exists()


@pytest.fixture(autouse=True, scope="module")
def _print_seed(request):
    """The seed on the terminal (not captured), so any run can be drawn again."""
    line = f"hostile-world seed: {SEED} (rerun with PF_PROPERTY_SEED={SEED}), {EXAMPLES} examples"
    plugins = request.config.pluginmanager
    reporter, capture = plugins.get_plugin("terminalreporter"), plugins.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@seed(SEED)
@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(drawn=hostile_images())
# drawn once by chance: a tape entry whose name is not its content's hash, in a merge that conflicts
# (shared.txt): refused (exit 3) like the clean merge, not handed to the user's checkout and --continue
@example(drawn=([], [], [TAPE_NAMES[0]], True))
def test_hostile_world_never_writes_outside_its_target(drawn, run_pf, tmp_path):
    root = Path(tempfile.mkdtemp(dir=tmp_path))
    try:
        exercise(root, drawn, run_pf)
    finally:
        shutil.rmtree(root, ignore_errors=True)
