"""Hostile images cannot make a read use unbounded memory: decompression bombs behind a
pointer, pointers claiming absurd sizes, sizes that disagree with their objects, over-long
JSON lines, and git's own compression (a zero blob of 512 MiB is about 512 KiB in a pack)
as a world file, a layer file, a held side-store object, an objects index or a store
record. Each is refused with one line, or streamed, by the command a user runs, within a
fixed amount of memory, measured on the real process."""
from __future__ import annotations

import errno
import io
import os
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
import zstandard

from mount_helpers import Pf, pf, requires_fuse  # noqa: F401

BOMB = 8 << 30  # what the bomb frames decode to
EXTRA_RSS = 64 << 20  # the most a refused read may add to a command's peak memory
CONTENT = b"0123456789"  # the file whose object a bomb replaces: its pointer says size 10
_bombs: dict[bool, bytes] = {}


def bomb_frame(declare_size: bool) -> bytes:
    """A zstd frame of 8 GiB of zeros (about 256 KiB), made by a streaming compressor so
    that making it takes no memory; its header declares its size or not."""
    if declare_size not in _bombs:
        out = io.BytesIO()
        c = zstandard.ZstdCompressor(level=1, write_content_size=declare_size, write_checksum=True)
        writer = c.stream_writer(out, size=BOMB if declare_size else -1, closefd=False)
        zeros = bytes(4 << 20)
        for _ in range(BOMB // len(zeros)):
            writer.write(zeros)
        writer.flush(zstandard.FLUSH_FRAME)
        _bombs[declare_size] = out.getvalue()
    return _bombs[declare_size]


def measured(pf: Pf, *args: str) -> tuple[subprocess.CompletedProcess, int]:
    """Run ``git pf ARGS`` in the repository; the result and the peak RSS of that process
    in bytes (from its own rusage, so no other process counts)."""
    out, err = pf.root / "stdout", pf.root / "stderr"
    with open(out, "wb") as o, open(err, "wb") as e:
        proc = subprocess.Popen(["git-pf", *args], cwd=pf.repo, env=pf.env, stdout=o, stderr=e)
        _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    done = subprocess.CompletedProcess(args, proc.returncode, out.read_text(), err.read_text())
    return done, usage.ru_maxrss * 1024


def one_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def git_config(pf: Pf, key: str, value: str) -> None:
    subprocess.run(["git", "-C", str(pf.repo), "config", key, value], check=True)


def image_of(pf: Pf, files: dict[str, bytes], *extra: str) -> str:
    sb = pf.root / "sandbox"
    sb.mkdir(exist_ok=True)
    for name, data in files.items():
        (sb / name).write_bytes(data)
    return pf.run("snapshot", "--fs-root", str(sb), "--name", "main", "-q", *extra).stdout.strip()


def object_path(pf: Pf, oid: str) -> Path:
    return pf.repo / ".git" / "pf" / "objects" / oid[:2] / oid[2:]


def replace_object(pf: Pf, oid: str, frame: bytes) -> None:
    path = object_path(pf, oid)
    os.chmod(path, 0o644)
    path.write_bytes(frame)


def pointer_blob(pf: Pf, name: str) -> bytes:
    return pygit2.Repository(str(pf.repo)).revparse_single(f"refs/pf/heads/main:world/fs/{name}").data


def with_blobs(pf: Pf, blobs: dict[str, pygit2.Oid], base: str = "main", branch: str = "main") -> str:
    """A new image on ``branch``: the image ``base``'s, with the blob at each image path
    of ``blobs`` put in (added or replaced), made with plumbing as an attacker would."""
    git = pygit2.Repository(str(pf.repo))
    head = git.revparse_single(f"refs/pf/heads/{base}")

    def rebuilt(tree, parts: list[str], oid: pygit2.Oid):
        tb = git.TreeBuilder(tree) if tree is not None else git.TreeBuilder()
        if len(parts) == 1:
            tb.insert(parts[0], oid, pygit2.GIT_FILEMODE_BLOB)
        else:
            sub = git.get(tree[parts[0]].id) if tree is not None and parts[0] in tree else None
            tb.insert(parts[0], rebuilt(sub, parts[1:], oid), pygit2.GIT_FILEMODE_TREE)
        return tb.write()

    tree = head.tree
    for path, oid in blobs.items():
        tree = git.get(rebuilt(tree, path.split("/"), oid))
    new = git.create_commit(None, head.author, head.committer, head.message, tree.id, [head.id])
    git.references.create(f"refs/pf/heads/{branch}", new, force=True)
    return str(new)


def with_pointer(pf: Pf, name: str, blob: bytes) -> str:
    """A new image on main: its parent's, with the pointer blob of ``name`` replaced."""
    return with_blobs(pf, {f"world/fs/{name}": pygit2.Repository(str(pf.repo)).create_blob(blob)})


@pytest.fixture
def small_pointer(pf):
    """An image "main" whose file f.bin (10 bytes) is a pointer to one side-store object:
    the image and that object's oid."""
    git_config(pf, "pf.largeFileThreshold", "1")
    image = image_of(pf, {"f.bin": CONTENT})
    oid = pointer_blob(pf, "f.bin").decode().split("oid sha256:")[1][:64]
    return image, oid


@pytest.mark.parametrize("declare_size", [True, False], ids=["declared-8GiB", "undeclared"])
def test_a_decompression_bomb_behind_a_pointer_is_refused_by_checkout_and_fsck_in_bounded_memory(
        pf, small_pointer, declare_size):
    image, oid = small_pointer
    ok, baseline = measured(pf, "checkout", image, "--into", str(pf.root / "good"))
    assert ok.returncode == 0, ok.stderr
    fsck_ok, fsck_baseline = measured(pf, "fsck")
    assert fsck_ok.returncode == 0, fsck_ok.stdout
    if not declare_size:  # the store's own limit is what stops an undeclared frame that no pointer sizes
        git_config(pf, "pf.maxFrameSize", "64m")
    replace_object(pf, oid, bomb_frame(declare_size))

    proc, peak = measured(pf, "checkout", image, "--into", str(pf.root / "out"))
    assert proc.returncode == 3 and oid in one_line(proc) and "f.bin" in proc.stderr
    assert peak - baseline < EXTRA_RSS, (peak, baseline)
    assert not (pf.root / "out").exists()

    fsck, peak = measured(pf, "fsck")
    assert fsck.returncode == 1 and "Traceback" not in fsck.stderr
    assert f"{oid} is corrupt (it inflates to " in fsck.stdout and "10 expected" in fsck.stdout
    assert peak - fsck_baseline < EXTRA_RSS, (peak, fsck_baseline)


@requires_fuse
@pytest.mark.parametrize("declare_size", [True, False], ids=["declared-8GiB", "undeclared"])
def test_a_decompression_bomb_read_through_a_mount_is_an_io_error_in_bounded_memory(pf, small_pointer,
                                                                                    declare_size):
    image, oid = small_pointer
    replace_object(pf, oid, bomb_frame(declare_size))
    mnt = pf.mount(image, pf.root / "mnt")
    pid = next(rec["pid"] for rec in pf.states())
    before = vm_hwm(pid)
    assert os.stat(mnt / "f.bin").st_size == len(CONTENT)
    with pytest.raises(OSError) as e:
        (mnt / "f.bin").read_bytes()
    assert e.value.errno == errno.EIO
    assert vm_hwm(pid) - before < EXTRA_RSS
    pf.run("umount", str(mnt))


def vm_hwm(pid: int) -> int:
    """Peak resident memory of process ``pid`` so far, in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmHWM")


def test_a_pointer_claiming_a_petabyte_is_refused_by_checkout_and_fsck(pf, small_pointer):
    blob = pointer_blob(pf, "f.bin").replace(b"size 10\n", b"size 1000000000000000\n")
    image = with_pointer(pf, "f.bin", blob)
    proc = pf.run("checkout", image, "--into", str(pf.root / "out"), check=False)
    line = one_line(proc)
    assert proc.returncode == 3 and "f.bin" in line and "pf.maxObjectSize" in line
    fsck = pf.run("fsck", check=False)
    assert fsck.returncode == 1 and "f.bin" in fsck.stdout and "over pf.maxObjectSize" in fsck.stdout


def test_the_object_size_limit_is_configurable(pf, small_pointer):
    image, _ = small_pointer
    git_config(pf, "pf.maxObjectSize", "5")
    proc = pf.run("checkout", image, "--into", str(pf.root / "out"), check=False)
    assert proc.returncode == 3 and "pf.maxObjectSize (5)" in one_line(proc)
    git_config(pf, "pf.maxObjectSize", "lots")
    proc = pf.run("checkout", image, "--into", str(pf.root / "out"), check=False)
    assert proc.returncode == 2 and "pf.maxObjectSize" in one_line(proc)


def test_fsck_reports_a_pointer_whose_size_differs_from_its_object(pf, small_pointer):
    _, oid = small_pointer
    blob = pointer_blob(pf, "f.bin").replace(b"size 10\n", b"size 11\n")
    image = with_pointer(pf, "f.bin", blob)
    fsck = pf.run("fsck", check=False)
    assert fsck.returncode == 1 and f"{oid} is corrupt (it inflates to 10 bytes, 11 expected)" in fsck.stdout
    proc = pf.run("checkout", image, "--into", str(pf.root / "out"), check=False)
    assert proc.returncode == 3 and oid in one_line(proc)


def test_a_chunk_index_that_does_not_add_up_to_the_pointer_size_is_corrupt(pf):
    data = os.urandom(3 << 20)  # several FastCDC chunks and a chunk index
    image_of(pf, {"big.bin": data})
    blob = pointer_blob(pf, "big.bin")
    assert b"chunks sha256:" in blob
    image = with_pointer(pf, "big.bin", blob.replace(f"size {len(data)}\n".encode(),
                                                     f"size {len(data) + 1}\n".encode()))
    fsck = pf.run("fsck", check=False)
    assert fsck.returncode == 1 and "do not add up to" in fsck.stdout and "big.bin" in fsck.stdout
    proc = pf.run("checkout", image, "--into", str(pf.root / "out"), check=False)
    assert proc.returncode == 3 and "do not add up to" in one_line(proc)


def test_a_jsonl_line_over_the_configured_limit_is_refused_with_one_line(pf):
    git_config(pf, "pf.largeFileThreshold", "1")
    short = pf.root / "short.jsonl"
    short.write_text('{"role":"user","content":"hi"}\n')
    long = pf.root / "long.jsonl"
    long.write_text('{"role":"user","content":"hi"}\n' + '{"role":"assistant","content":"' + "x" * 5000 + '"}\n')
    a = image_of(pf, {"a.txt": b"a"}, "--messages", str(short))
    b = image_of(pf, {"a.txt": b"b"}, "--messages", str(long))
    assert pf.run("diff", a, b).returncode == 0
    git_config(pf, "pf.maxJsonLine", "1k")
    proc = pf.run("diff", a, b, check=False)
    line = one_line(proc)
    assert proc.returncode == 3 and "trace/messages.jsonl:2" in line and "pf.maxJsonLine (1024)" in line


# -- git's own compression: a blob of zeros stored in a few MiB --------------------------------

ZEROS = 512 << 20  # the zero blob's size: 512 MiB (over pf.maxBlobSize), about 512 KiB as a git object
ZERO_SAMPLES = 16  # 1 MiB windows of a checked-out copy compared with zeros
LAYER_BOMBS = {"messages": "trace/messages.jsonl", "env": "world/env.json"}  # layer files replaced by it


@pytest.fixture(scope="module")
def zero_pack(tmp_path_factory) -> tuple[str, list[Path]]:
    """A pack holding one blob of ZEROS zero bytes, made once: git streams a sparse file over its
    core.bigFileThreshold straight into a pack, in little memory. Its id and the pack's files."""
    d = tmp_path_factory.mktemp("zeros")
    subprocess.run(["git", "init", "-q", str(d)], check=True)
    with open(d / "zeros", "wb") as f:
        f.truncate(ZEROS)
    oid = subprocess.run(["git", "-C", str(d), "-c", "core.bigFileThreshold=1m", "hash-object", "-w", "zeros"], check=True, capture_output=True,
                         text=True).stdout.strip()
    return oid, sorted((d / ".git" / "objects" / "pack").iterdir())


@pytest.fixture
def zero_images(pf, zero_pack):
    """Images as pushed by an attacker: ``a`` and ``b`` normal (on main), and on a branch of
    each name, b with the zero blob as ``world`` world/fs/big.bin, as ``messages``
    trace/messages.jsonl, as ``env`` world/env.json."""
    oid, files = zero_pack
    for f in files:
        (pf.repo / ".git" / "objects" / "pack" / f.name).write_bytes(f.read_bytes())
    msgs = pf.root / "m.jsonl"
    msgs.write_text('{"role":"user","content":"hi"}\n')
    a = image_of(pf, {"a.txt": b"a"}, "--messages", str(msgs))
    b = image_of(pf, {"a.txt": b"b"})
    zero = pygit2.Oid(hex=oid)
    world = with_blobs(pf, {"world/fs/big.bin": zero}, base="main", branch="bomb-world")
    out = {"a": a, "b": b, "world": world}
    for name, path in LAYER_BOMBS.items():
        out[name] = with_blobs(pf, {path: zero}, base="main", branch=f"bomb-{name}")
    return out


def test_a_huge_blob_in_a_world_is_shown_diffed_checked_out_and_merged_in_bounded_memory(pf, zero_images):
    im = zero_images
    ok, base = measured(pf, "show", im["b"])
    assert ok.returncode == 0, ok.stderr
    proc, peak = measured(pf, "show", im["world"])
    assert proc.returncode == 0, proc.stderr
    assert peak - base < EXTRA_RSS, (peak, base)

    ok, base = measured(pf, "diff", "-p", im["a"], im["b"])
    assert ok.returncode == 0 and "+b" in ok.stdout, ok.stderr
    proc, peak = measured(pf, "diff", "-p", im["b"], im["world"])
    assert proc.returncode == 0, proc.stderr
    assert "Binary files /dev/null and b/big.bin differ" in proc.stdout  # too large for a text patch
    assert peak - base < EXTRA_RSS, (peak, base)

    ok, base = measured(pf, "checkout", im["b"], "--into", str(pf.root / "small"))
    assert ok.returncode == 0, ok.stderr
    proc, peak = measured(pf, "checkout", im["world"], "--into", str(pf.root / "out"))
    assert proc.returncode == 0, proc.stderr
    assert peak - base < EXTRA_RSS, (peak, base)
    out = pf.root / "out" / "big.bin"
    assert out.stat().st_size == ZEROS and (pf.root / "out" / "a.txt").read_bytes() == b"b"
    with open(out, "rb") as f:  # the right bytes: windows spread over the file, the last one included
        for i in range(ZERO_SAMPLES):
            f.seek((ZEROS - (1 << 20)) * i // (ZERO_SAMPLES - 1))
            assert f.read(1 << 20) == bytes(1 << 20)
    out.unlink()

    # a merge bringing in the huge file (theirs) beside a change of ours
    image_of(pf, {"a.txt": b"b", "c.txt": b"ours"})
    with_blobs(pf, {"world/fs/small.bin": pygit2.Repository(str(pf.repo)).create_blob(b"x")},
               base="bomb-world~1", branch="normal-side")
    ok, base = measured(pf, "merge", "normal-side")
    assert ok.returncode == 0, ok.stderr + ok.stdout
    proc, peak = measured(pf, "merge", "bomb-world")
    assert proc.returncode == 0, proc.stderr + proc.stdout
    assert peak - base < EXTRA_RSS, (peak, base)


@pytest.mark.parametrize("name, layer, limit", [("messages", "trace", "pf.maxBlobSize"),
                                               ("env", "env", "pf.maxJsonLine")])
def test_a_huge_layer_file_is_refused_with_one_line_before_it_is_read(pf, zero_images, name, layer, limit):
    im = zero_images
    ok, base = measured(pf, "show", im["b"])
    assert ok.returncode == 0, ok.stderr
    for args in (("show", im[name]), ("diff", "-p", im["b"], im[name]),
                 ("checkout", im[name], "--layers", layer, "--into", str(pf.root / "out")),
                 ("merge", f"bomb-{name}")):
        proc, peak = measured(pf, *args)
        line = one_line(proc)
        assert proc.returncode == 3 and LAYER_BOMBS[name] in line and f"over {limit}" in line, (args, line)
        assert peak - base < EXTRA_RSS, (args, peak, base)
    assert not (pf.root / "out").exists()


@requires_fuse
def test_a_huge_blob_read_through_a_mount_is_served_in_ranges_in_bounded_memory(pf, zero_images):
    mnt = pf.mount(zero_images["world"], pf.root / "mnt")
    pid = next(rec["pid"] for rec in pf.states())
    before = vm_hwm(pid)
    big = mnt / "big.bin"
    assert os.stat(big).st_size == ZEROS
    with open(big, "rb") as f:  # the start, and a range further on (read up to there, not past it)
        assert f.read(1 << 20) == bytes(1 << 20)
        f.seek(64 << 20)
        assert f.read(1 << 20) == bytes(1 << 20)
    assert vm_hwm(pid) - before < EXTRA_RSS
    pf.run("umount", str(mnt))


@pytest.mark.parametrize("listed", ["as-its-blob", "as-small"])
def test_a_held_object_whose_git_blob_is_huge_is_refused_unread(pf, small_pointer, zero_pack, listed):
    """A side-store object the default adapter brought as a git blob (listed in
    refs/pf/objects) whose blob is the zero blob: listed at its true size it is more than a
    frame of the pointer's 10 bytes can take; listed as small, the blob's header says more."""
    from git_pf.transport.held import HeldObjects
    from git_pf.transport.index import Entry
    image, oid = small_pointer
    ok, base = measured(pf, "checkout", image, "--into", str(pf.root / "good"))
    assert ok.returncode == 0, ok.stderr
    zero, files = zero_pack
    for f in files:
        (pf.repo / ".git" / "objects" / "pack" / f.name).write_bytes(f.read_bytes())
    object_path(pf, oid).unlink()
    HeldObjects(pygit2.Repository(str(pf.repo))).receive(
        {oid: Entry(ZEROS if listed == "as-its-blob" else 100, (zero,))}, "origin")
    proc, peak = measured(pf, "checkout", image, "--into", str(pf.root / "out"))
    line = one_line(proc)
    assert proc.returncode == 3 and oid in line and ("refused" in line or "corrupt" in line), line
    assert peak - base < EXTRA_RSS, (peak, base)
    assert not (pf.root / "out").exists()


def test_a_remote_objects_index_holding_a_huge_blob_is_not_copied_in(tmp_path, zero_pack):
    """The git adapter copies a remote's objects index commit (a few KB) in from a scratch
    repository; one whose tree holds the zero blob is refused unread."""
    from git_pf.core.errors import DataError
    from git_pf.transport import scratch
    zero, files = zero_pack
    src, dst = (pygit2.init_repository(str(tmp_path / n), bare=True) for n in ("src", "dst"))
    for f in files:
        (Path(src.path) / "objects" / "pack" / f.name).write_bytes(f.read_bytes())
    tb = src.TreeBuilder()
    tb.insert("aa", pygit2.Oid(hex=zero), pygit2.GIT_FILEMODE_BLOB)
    top = src.TreeBuilder()
    top.insert("index", tb.write(), pygit2.GIT_FILEMODE_TREE)
    sig = pygit2.Signature("t", "t@e")
    commit = str(src.create_commit(None, sig, sig, "index", top.write(), []))
    with pytest.raises(DataError, match="over pf.maxBlobSize"):
        scratch.copy_index(src, dst, commit)
    assert pygit2.Oid(hex=zero) not in dst.odb


@pytest.mark.parametrize("where", ["store.json", "sizes/aa"])
def test_a_store_record_holding_a_huge_blob_is_refused_unread(tmp_path, zero_pack, where):
    """A pushed store record (refs/pf/meta/store) whose record file or a sizes bucket is the
    zero blob: refused with one line by its size, before it is read (pygit2's lookup of a
    blob inflates it whole, so the size is taken from the object header)."""
    from git_pf.core.errors import DataError
    from git_pf.transport import storerecord
    zero, files = zero_pack
    git = pygit2.init_repository(str(tmp_path / "r"), bare=True)
    for f in files:
        (Path(git.path) / "objects" / "pack" / f.name).write_bytes(f.read_bytes())
    good = git.get(storerecord.write_commit(git, "git", None, sizes={"aa" + "0" * 62: 1}))
    tb = git.TreeBuilder(good.tree)
    if where == "store.json":
        tb.insert("store.json", pygit2.Oid(hex=zero), pygit2.GIT_FILEMODE_BLOB)
    else:
        inner = git.TreeBuilder()
        inner.insert("aa", pygit2.Oid(hex=zero), pygit2.GIT_FILEMODE_BLOB)
        tb.insert("sizes", inner.write(), pygit2.GIT_FILEMODE_TREE)
    sig = pygit2.Signature("t", "t@e")
    bad = str(git.create_commit(None, sig, sig, "record", tb.write(), []))

    def read(commit: str) -> tuple[int, str, int]:
        """Read the record ``commit`` in a fresh process: its exit code, stderr and peak RSS."""
        code = ("import pygit2, sys\nfrom git_pf.transport import storerecord\nfrom git_pf.core.errors import DataError\n"
                f"git = pygit2.Repository({git.path!r})\n"
                f"try:\n    storerecord._read_commit(git, {commit!r}, 'the record')\n"
                f"    storerecord.read_listings(git, {commit!r}, 'the record')\n"
                "except DataError as e:\n    sys.exit(str(e))\n")
        with subprocess.Popen([sys.executable, "-c", code], stderr=subprocess.PIPE, text=True) as proc:
            _, status, usage = os.wait4(proc.pid, 0)
            return os.waitstatus_to_exitcode(status), proc.stderr.read(), usage.ru_maxrss * 1024

    ok, err, base = read(str(good.id))
    assert ok == 0, err
    code, err, peak = read(bad)
    assert code == 1 and f"{where.split('/')[-1]}: over" in err, err
    assert peak - base < EXTRA_RSS, (peak, base)
