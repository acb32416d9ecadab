"""A read-only mount shows exactly what a checkout of the same image writes."""
from __future__ import annotations

import errno
import os
import random
import subprocess
import termios
import threading
import time
from pathlib import Path

import pytest

from git_pf.mount import mounts
from git_pf.mount import protocol

from mount_helpers import describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def test_readonly_mount_equals_checkout(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    pf.run("checkout", image, "--into", str(pf.root / "co"))
    mnt = pf.mount(image, pf.root / "mnt")
    assert describe(mnt) == describe(pf.root / "co")
    assert describe(mnt)["empty/deeper"][0] == "dir"
    assert os.path.isdir(mnt / ".git") and (mnt / ".git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    listed = pf.run("mounts", "--json").stdout
    assert '"mode": "ro"' in listed and '"status": "mounted"' in listed and image in listed
    pf.run("umount", str(mnt))
    assert not os.listdir(mnt)
    assert pf.states() == []


def daemon_stats(pf, mnt: Path) -> dict:
    state = mounts.for_mountpoint(str(pf.repo / ".git"), mounts.canonical(mnt))[0]
    control = mounts.Control(state)
    try:
        return control.ask({"op": "stats"})
    finally:
        control.close()


def requests_served(pf, mnt: Path) -> dict[int, int]:
    """The daemon's count of FUSE requests served, by opcode."""
    return {int(op): n for op, n in daemon_stats(pf, mnt)["requests"].items()}


def test_readonly_mount_reads_by_inode_without_open_or_release(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    pf.run("checkout", image, "--into", str(pf.root / "co"))
    mnt = pf.mount(image, pf.root / "mnt")
    assert describe(mnt) == describe(pf.root / "co")  # reads every file, lists every directory
    served = requests_served(pf, mnt)
    assert served.get(protocol.OPEN, 0) <= 1 and served.get(protocol.OPENDIR, 0) <= 1  # answered ENOSYS once
    assert served.get(protocol.RELEASE, 0) == 0 and served.get(protocol.RELEASEDIR, 0) == 0
    assert served[protocol.READ] >= 2  # the rest may have been stored ahead (prefill)
    with open(mnt / "src" / "main.py", "rb") as f:  # a buffered open asks isatty: answered ENOTTY at once
        assert not f.isatty()
        with pytest.raises(termios.error) as info:
            termios.tcgetattr(f.fileno())
        assert info.value.args[0] == errno.ENOTTY
    for _ in range(3):  # the page cache outlives close/open: no new request
        assert (mnt / "src" / "main.py").read_text() == "print('hello')\n"
    assert requests_served(pf, mnt)[protocol.READ] == served[protocol.READ]


def test_reading_a_directory_stores_its_other_small_files_ahead(pf):
    sb = pf.root / "many"
    files = {f"f{i:03d}.txt": f"file {i}\n".encode() * (i + 1) for i in range(40)}
    (sb / "dir").mkdir(parents=True)
    for name, data in files.items():
        (sb / "dir" / name).write_bytes(data)
    image = snapshot(pf, sb)
    mnt = pf.mount(image, pf.root / "mnt")
    names = sorted(os.listdir(mnt / "dir"))
    assert names == sorted(files)
    for name in names[:2]:  # the second file read from the directory hands the other 38 to the prefill
        assert (mnt / "dir" / name).read_bytes() == files[name]
    deadline = time.monotonic() + 60
    while daemon_stats(pf, mnt)["prefilled"] < 38 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon_stats(pf, mnt)["prefilled"] == 38
    reads = requests_served(pf, mnt)[protocol.READ]
    for name in names[2:]:  # from the page cache: no request reaches the daemon
        assert (mnt / "dir" / name).read_bytes() == files[name]
    assert requests_served(pf, mnt)[protocol.READ] == reads == 2


def _small_tree(pf, dirs: int, per_dir: int) -> tuple[str, dict[str, bytes]]:
    sb = pf.root / "walk"
    files = {}
    for d in range(dirs):
        for i in range(per_dir):
            rel = f"d{d:02d}/f{i:03d}.txt"
            files[rel] = f"{rel}\n".encode() * (i + 1)
            (sb / rel).parent.mkdir(parents=True, exist_ok=True)
            (sb / rel).write_bytes(files[rel])
    return snapshot(pf, sb), files


def _wait_prefilled(pf, mnt: Path, want: int) -> int:
    deadline = time.monotonic() + 60
    while daemon_stats(pf, mnt)["prefilled"] < want and time.monotonic() < deadline:
        time.sleep(0.05)
    return daemon_stats(pf, mnt)["prefilled"]


def test_reading_one_directory_stores_the_next_listed_directories_ahead(pf):
    """find | xargs cat: every directory is listed before the first file is read. Two reads
    in d00 hand its other files to the prefill, and those of the directories after it."""
    image, files = _small_tree(pf, 6, 20)
    mnt = pf.mount(image, pf.root / "mnt")
    for d in range(6):
        assert len(os.listdir(mnt / f"d{d:02d}")) == 20
    order = sorted(files)
    for rel in order[:2]:
        assert (mnt / rel).read_bytes() == files[rel]
    assert _wait_prefilled(pf, mnt, 118) == 118  # 18 left in d00, and 5 directories of 20
    for rel in order[2:]:
        assert (mnt / rel).read_bytes() == files[rel]
    assert requests_served(pf, mnt)[protocol.READ] == 2


def test_a_directory_listed_while_files_are_read_whole_is_stored_as_listed(pf):
    """os.walk: a directory is listed only when the walk gets there. Its files are stored
    as soon as it is listed once a program has been reading whole files; the directories
    the kernel had not been shown yet were not given up on before."""
    image, files = _small_tree(pf, 3, 20)
    mnt = pf.mount(image, pf.root / "mnt")
    assert sorted(os.listdir(mnt)) == ["d00", "d01", "d02"]
    names = sorted(os.listdir(mnt / "d00"))
    for name in names[:2]:
        assert (mnt / "d00" / name).read_bytes() == files[f"d00/{name}"]
    assert _wait_prefilled(pf, mnt, 18) == 18
    reads = requests_served(pf, mnt)[protocol.READ]
    assert len(os.listdir(mnt / "d01")) == 20  # listed now: stored at once
    assert _wait_prefilled(pf, mnt, 38) == 38
    for rel in sorted(r for r in files if r.startswith("d01/")):
        assert (mnt / rel).read_bytes() == files[rel]
    assert requests_served(pf, mnt)[protocol.READ] == reads == 2


def test_listings_of_subdirectories_are_built_ahead_of_a_walk(pf):
    sb = pf.root / "tree"
    for d in range(12):
        for f in range(3):
            (sb / f"d{d:02d}" / f"sub{f}").mkdir(parents=True)
            (sb / f"d{d:02d}" / f"f{f}.txt").write_text(f"{d} {f}\n")
    image = snapshot(pf, sb)
    pf.run("checkout", image, "--into", str(pf.root / "co"))
    mnt = pf.mount(image, pf.root / "mnt")
    assert sorted(os.listdir(mnt)) == [f"d{d:02d}" for d in range(12)]
    deadline = time.monotonic() + 60  # built while no request waits: the first 8 subdirectories
    while daemon_stats(pf, mnt)["listed_ahead"] < 8 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert daemon_stats(pf, mnt)["listed_ahead"] == 8
    assert describe(mnt) == describe(pf.root / "co")  # a whole walk, partly from listings built ahead
    assert daemon_stats(pf, mnt)["listed_ahead"] > 8


def test_large_file_random_reads_match(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    mnt = pf.mount(image, pf.root / "mnt")
    want = (sb / "data.bin").read_bytes()
    rng = random.Random(5)
    fd = os.open(mnt / "data.bin", os.O_RDONLY)
    try:
        for _ in range(200):
            off = rng.randrange(0, len(want) + 10)
            n = rng.choice([1, 17, 4096, 300_000, 1_500_000])
            assert os.pread(fd, n, off) == want[off:off + n]
    finally:
        os.close(fd)
    assert (mnt / "data.bin").read_bytes() == want


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_concurrent_reads_of_a_large_file_each_get_their_bytes(pf, mode):
    """Reads of a large file are decoded and answered on several threads at once."""
    sb = make_sandbox(pf.root)
    mnt = pf.mount(snapshot(pf, sb), pf.root / "mnt", *(["--rw"] if mode == "rw" else []))
    want = (sb / "data.bin").read_bytes()
    errors: list = []

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        fd = os.open(mnt / "data.bin", os.O_RDONLY)
        try:
            for _ in range(40):
                off, n = rng.randrange(0, len(want)), rng.choice([4096, 200_000, 1_100_000])
                if os.pread(fd, n, off) != want[off:off + n]:
                    errors.append((seed, off, n))
        except OSError as e:
            errors.append((seed, e))
        finally:
            os.close(fd)

    threads = [threading.Thread(target=reader, args=(seed,)) for seed in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert (mnt / "data.bin").read_bytes() == want


def test_a_large_file_waiting_for_its_data_does_not_hold_the_rest_of_the_mount(pf):
    """A large file's chunk that is slow to come (here a FIFO in its place, as a lazy fetch or a
    slow disk would be) holds up the reads that need it, not every other request of the mount."""
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    want = (sb / "data.bin").read_bytes()
    objects = pf.repo / ".git" / "pf" / "objects"
    chunk = max(objects.glob("??/*"), key=lambda p: p.stat().st_size)  # a data chunk of data.bin
    kept = pf.root / "chunk"
    os.rename(chunk, kept)
    os.mkfifo(chunk)
    mnt = pf.mount(image, pf.root / "mnt")
    with open(pf.root / "big.out", "wb") as out:  # another process: this one holds nothing open on the mount
        big = subprocess.Popen(["cat", str(mnt / "data.bin")], stdout=out, stderr=subprocess.DEVNULL)
    try:
        _wait_for_fifo_reader(pf.states()[0]["pid"])
        small = subprocess.run(["cat", str(mnt / "src" / "main.py")], capture_output=True, timeout=60)
        assert small.stdout == b"print('hello')\n"
        assert (mnt / "link").read_text() == "print('hello')\n"
        assert big.poll() is None  # still waiting for the chunk: no writer has come to the FIFO
    finally:
        writer = os.open(chunk, os.O_RDWR)  # the waiting read of the FIFO goes on, and finds an empty frame
        os.replace(kept, chunk)
        os.close(writer)
        big.wait(60)
    assert big.returncode != 0 or (pf.root / "big.out").read_bytes() == want  # EIO, or read once it was back
    assert (mnt / "data.bin").read_bytes() == want  # read again once it is back


def _wait_for_fifo_reader(pid: int) -> None:
    """Until a thread of ``pid`` waits in the open of a FIFO for a writer to come."""
    for _ in range(3000):
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                if Path(f"/proc/{pid}/task/{task}/wchan").read_text() == "wait_for_partner":
                    return
            except OSError:
                continue
        time.sleep(0.01)
    raise AssertionError("the mount's daemon never opened the chunk")


def test_a_large_file_stored_raw_is_served_in_place_and_still_checked(pf):
    """Random content, which zstd stores in raw blocks, is served from the side store's files
    without decoding, exactly; a byte changed in one chunk's file gives EIO, never wrong bytes."""
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    want = (sb / "data.bin").read_bytes()
    mnt = pf.mount(image, pf.root / "mnt")
    assert (mnt / "data.bin").read_bytes() == want
    chunks = daemon_stats(pf, mnt)["chunks"]
    assert chunks["mapped"] > 1 and chunks["decoded"] == 0
    victim = max((pf.repo / ".git" / "pf" / "objects").glob("??/*"), key=lambda p: p.stat().st_size)
    os.chmod(victim, 0o644)
    with open(victim, "r+b") as f:
        f.seek(victim.stat().st_size // 2)
        byte = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte[0] ^ 0x20]))
    again = pf.mount(image, pf.root / "mnt2")  # a fresh daemon, and no page cached yet
    with pytest.raises(OSError) as info:
        (again / "data.bin").read_bytes()
    assert info.value.errno == errno.EIO
    log = "".join(p.read_text() for p in (pf.repo / ".git" / "pf" / "mounts").glob("*/daemon.log"))
    assert "checksum does not match" in log


def _slices(pid: int) -> dict[int, int]:
    """Each thread of ``pid`` (by thread id) -> its fair-scheduler slice, in ns."""
    out: dict[int, int] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            sched = Path(f"/proc/{pid}/task/{tid}/sched").read_text()
        except FileNotFoundError:  # a thread that ended meanwhile
            continue
        out[int(tid)] = next(int(line.split()[-1]) for line in sched.splitlines() if line.startswith("se.slice"))
    return out


def test_the_request_loop_and_its_reply_threads_run_with_the_shortest_slice(pf):
    """On a busy machine a request is answered as soon as it comes: the request loop (and the
    reply threads it starts) ask the fair scheduler for its 100 µs slice, so a woken daemon
    preempts the running task instead of waiting out that task's slice (Linux 6.12+)."""
    if "se.slice" not in Path("/proc/self/sched").read_text():
        pytest.skip("this kernel does not show a task's slice")
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    mnt = pf.mount(image, pf.root / "mnt")
    assert (mnt / "data.bin").read_bytes() == (sb / "data.bin").read_bytes()  # starts the reply threads
    pid = mounts.for_mountpoint(str(pf.repo / ".git"), mounts.canonical(mnt))[0].pid
    slices = _slices(pid)
    assert slices[pid] == 100_000  # the request loop is the daemon's main thread
    assert sum(value == 100_000 for value in slices.values()) >= 2  # and a reply thread it started


def test_readonly_mount_refuses_writes(pf):
    sb = make_sandbox(pf.root)
    mnt = pf.mount(snapshot(pf, sb), pf.root / "mnt")
    for attempt in (lambda: (mnt / "new").write_text("x"), lambda: os.unlink(mnt / "run.sh"),
                    lambda: os.mkdir(mnt / "d"), lambda: os.chmod(mnt / "run.sh", 0o700)):
        with pytest.raises(OSError) as info:
            attempt()
        assert info.value.errno == errno.EROFS


def test_corrupt_or_missing_side_store_object_gives_eio_not_a_hang(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    objects = pf.repo / ".git" / "pf" / "objects"
    victims = list(objects.glob("??/*"))
    assert len(victims) > 2
    for i, p in enumerate(victims):  # damage or delete every object of the large file
        if i % 2:
            p.unlink()
        else:
            os.chmod(p, 0o644)
            p.write_bytes(b"garbage")
    mnt = pf.mount(image, pf.root / "mnt")
    start = time.monotonic()
    with pytest.raises(OSError) as info:
        (mnt / "data.bin").read_bytes()
    assert info.value.errno == errno.EIO
    assert time.monotonic() - start < 30
    assert (mnt / "src" / "main.py").read_text() == "print('hello')\n"  # the rest still works
    log = next((pf.repo / ".git" / "pf" / "mounts").glob("*/daemon.log")).read_text()
    assert "corrupt" in log or "missing" in log


def test_mount_errors_are_one_line(pf):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    bad = pf.run("mount", "no-such-image", str(pf.root / "m"), check=False)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    pf.mount(image, pf.root / "m")
    again = pf.run("mount", image, str(pf.root / "m"), check=False)
    assert again.returncode == 2 and "already a git-pf mount" in again.stderr
    missing = pf.run("umount", str(pf.root / "elsewhere"), check=False)
    assert missing.returncode == 2 and "not a git-pf mount" in missing.stderr
    Path(pf.root / "file").write_text("x")
    notdir = pf.run("mount", image, str(pf.root / "file"), check=False)
    assert notdir.returncode == 2 and "not a directory" in notdir.stderr


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_ls_a_lists_dot_and_dotdot_with_their_inodes(pf, mode):
    sb = make_sandbox(pf.root)
    image = snapshot(pf, sb)
    mnt = pf.mount(image, pf.root / f"mnt-{mode}", *(["--rw"] if mode == "rw" else []))
    for rel in ("", "src", "src/pkg"):
        d = mnt / rel if rel else mnt
        out = subprocess.run(["ls", "-a1i", str(d)], capture_output=True, text=True, check=True).stdout.split("\n")
        listed = dict(reversed(line.split(None, 1)) for line in out if line.strip())
        assert {".", ".."} <= set(listed) and set(listed) - {".", ".."} == set(os.listdir(d))
        assert int(listed["."]) == os.stat(d).st_ino
        if rel:  # the root's '..' is the mount point's parent, which the kernel itself answers for
            assert int(listed[".."]) == os.stat(d.parent).st_ino
    # a walk that meets '.' and '..' still sees each file once
    assert sorted(p.relative_to(mnt).as_posix() for p in mnt.rglob("*")) == \
        sorted(p.relative_to(sb).as_posix() for p in sb.rglob("*"))
