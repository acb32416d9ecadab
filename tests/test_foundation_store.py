"""The side store: large files as chunked, verified, content-addressed objects; the stat cache."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest
import zstandard

from git_pf.store import pointer
from git_pf.core.errors import CorruptObject, DataError
from git_pf.store.sidestore import SideStore
from world_helpers import make_grid


def test_large_file_goes_to_side_store_as_pointer(repo, tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    data = os.urandom(5 * 1024 * 1024)
    (sb / "weights.bin").write_bytes(data)
    (sb / "small.txt").write_bytes(b"x" * 100)
    snap = repo.snapshot(sb, name="main")
    blob = repo.git.revparse_single("refs/pf/heads/main:world/fs/weights.bin").data
    assert len(blob) < 1024 and blob.startswith(b"version https://git-pf.dev/spec/pointer/v1\n")
    ptr = pointer.decode(blob)
    assert ptr.size == len(data) and ptr.chunks is not None
    objects = list(repo.store.iter_oids())
    assert len(objects) >= 3  # several FastCDC chunks plus the chunk index
    for oid in objects:  # each object is a zstd frame named by the sha256 of its raw bytes
        raw = zstandard.ZstdDecompressor().decompress(repo.store.path_for(oid).read_bytes())
        assert __import__("hashlib").sha256(raw).hexdigest() == oid
    out = repo.checkout("main", tmp_path / "out").path
    assert (out / "weights.bin").read_bytes() == data
    assert snap.stats.pointers == 1


def test_threshold_is_configurable(repo, tmp_path):
    repo.git.config["pf.largeFileThreshold"] = "10k"
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "a").write_bytes(b"a" * 20_000)
    (sb / "b").write_bytes(b"b" * 5_000)
    assert repo.snapshot(sb, name="main").stats.pointers == 1


def test_an_insert_restores_only_nearby_chunks(repo, tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    data = os.urandom(16 * 1024 * 1024)
    (sb / "f").write_bytes(data)
    repo.snapshot(sb, name="main")
    before = set(repo.store.iter_oids())
    (sb / "f").write_bytes(data[:8_000_000] + b"inserted" + data[8_000_000:])
    repo.snapshot(sb, name="main")
    new = set(repo.store.iter_oids()) - before
    assert 1 <= len(new) <= 4  # the chunk(s) around the insert, the new index


def _image_with_replaced_object(repo, tmp_path, frame: bytes) -> tuple[str, Path]:
    """An image "main" of one 2 MiB file whose largest side-store object's file now holds
    ``frame``: (that object's oid, its path)."""
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "big.bin").write_bytes(os.urandom(2 * 1024 * 1024))
    repo.snapshot(sb, name="main")
    victim = max(repo.store.iter_oids(), key=lambda o: repo.store.path_for(o).stat().st_size)
    path = repo.store.path_for(victim)
    os.chmod(path, 0o644)
    path.write_bytes(frame)
    return victim, path


def test_corrupt_object_is_a_clear_error_and_leaves_no_checkout(repo, tmp_path, run_pf):
    victim, path = _image_with_replaced_object(  # a frame without a checksum, as earlier writers made
        repo, tmp_path, zstandard.ZstdCompressor().compress(b"not the original bytes"))
    with pytest.raises(DataError, match="big.bin"):
        repo.checkout("main", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if ".pf-checkout-" in p.name] == []
    proc = run_pf("checkout", "main", "--into", tmp_path / "out2", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 3 and "big.bin" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "Traceback" not in proc.stderr
    fsck = run_pf("fsck", cwd=tmp_path / "repo", check=False)
    assert fsck.returncode == 1 and victim in fsck.stdout
    os.remove(path)  # leave the repository consistent for git fsck


@pytest.mark.parametrize("direct", [False, True], ids=["buffered", "direct"])
def test_a_bit_flipped_in_a_stored_frame_is_caught_by_its_checksum(tmp_path, direct):
    store = SideStore(tmp_path / "objects")
    data = os.urandom((1 << 20) + 123)  # incompressible: stored as raw blocks, decoded without a look
    oid = store.put(data, direct=direct)
    path = store.path_for(oid)
    frame = bytearray(path.read_bytes())
    assert zstandard.get_frame_parameters(bytes(frame)).has_checksum
    assert store.get(oid) == data
    frame[len(frame) // 2] ^= 0x10
    os.chmod(path, 0o644)
    path.write_bytes(frame)
    with pytest.raises(CorruptObject, match="checksum"):
        store.get(oid)
    with pytest.raises(CorruptObject):
        store.get(oid, rehash=True)


def test_a_frame_under_another_name_is_caught_by_fsck_and_by_rehash_reads(repo, tmp_path, run_pf):
    """A read trusts the name of a file in the store (every way in checks it) and checks the frame;
    `git pf fsck`, and every read under pf.rehashReads, check the name too."""
    victim, path = _image_with_replaced_object(
        repo, tmp_path, zstandard.ZstdCompressor(write_checksum=True).compress(b"a sound frame, of other bytes"))
    fsck = run_pf("fsck", cwd=tmp_path / "repo", check=False)
    assert fsck.returncode == 1 and victim in fsck.stdout
    subprocess.run(["git", "config", "pf.rehashReads", "true"], cwd=tmp_path / "repo", check=True)
    proc = run_pf("checkout", "main", "--into", tmp_path / "out", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 3 and "big.bin" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
    subprocess.run(["git", "config", "pf.rehashReads", "sometimes"], cwd=tmp_path / "repo", check=True)
    proc = run_pf("checkout", "main", "--into", tmp_path / "out", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 2 and "pf.rehashReads" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    os.remove(path)  # leave the repository consistent for git fsck


def test_store_refuses_corrupt_incoming_objects(tmp_path):
    store = SideStore(tmp_path / "objects")
    oid = store.put(b"hello")
    assert store.get(oid) == b"hello"
    with pytest.raises(CorruptObject):
        store.put_compressed("0" * 64, b"not a zstd frame")
    with pytest.raises(CorruptObject):
        store.put_compressed("1" * 64, zstandard.ZstdCompressor().compress(b"hello"))
    assert not store.has("0" * 64) and not store.has("1" * 64)


def test_stat_cache_reads_only_changed_files(repo, tmp_path):
    sb = make_grid(tmp_path / "sb", 20, 100)
    time.sleep(0.15)  # let every file leave the racy window (ctime within 100 ms of a snapshot)
    first = repo.snapshot(sb, name="main")
    assert first.stats.files_read == 2000
    for i in range(10):
        (sb / f"d{i}" / "f0.txt").write_text(f"edited {i}\n")
    second = repo.snapshot(sb, name="main")
    assert second.stats.files_read == 10
    assert repo.diff("main~1", "main").world.changed == [f"d{i}/f0.txt" for i in range(10)]
    out = repo.checkout("main", tmp_path / "out").path
    assert (out / "d3" / "f0.txt").read_text() == "edited 3\n"


def test_stat_cache_notices_a_same_size_edit(repo, tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f").write_text("aaaa")
    os.utime(sb / "f", (1_000_000, 1_000_000))
    time.sleep(0.15)
    repo.snapshot(sb, name="main")
    (sb / "f").write_text("bbbb")
    os.utime(sb / "f", (1_000_000, 1_000_000))  # same size, same mtime: ctime still differs
    repo.snapshot(sb, name="main")
    assert repo.checkout("main", tmp_path / "out").path.joinpath("f").read_text() == "bbbb"


def test_snapshot_objects_go_into_one_pack_and_many_packs_get_repacked(repo, tmp_path):
    sb = make_grid(tmp_path / "sb", 5, 40)
    repo.snapshot(sb, name="main")
    pack_dir = tmp_path / "repo" / ".git" / "objects" / "pack"
    assert len(list(pack_dir.glob("*.pack"))) == 1  # 200 blobs + 6 trees: one pack, not 206 files
    loose = [p for p in (tmp_path / "repo" / ".git" / "objects").glob("??/*")]
    assert len(loose) < 10  # only the image's own few files and the commit
    repo.git.config["gc.autoPackLimit"] = 3
    for i in range(4):
        (sb / "d0" / "f0.txt").write_text(f"edit {i}")
        repo.snapshot(sb, name="main")
    deadline = time.monotonic() + 60
    while len(list(pack_dir.glob("*.pack"))) > 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # git gc --auto runs detached
    assert len(list(pack_dir.glob("*.pack"))) <= 3
    while subprocess.run(["pgrep", "-f", f"{tmp_path}/repo/.git gc"], capture_output=True).returncode == 0:
        time.sleep(0.1)  # let it finish before git fsck runs


def test_a_snapshot_waits_for_a_branch_lock_held_for_a_moment(repo, tmp_path):
    sb = make_grid(tmp_path / "sb", 2, 2)
    repo.snapshot(sb, name="main")
    lock = tmp_path / "repo" / ".git" / "refs" / "pf" / "heads" / "main.lock"
    lock.write_bytes(b"")  # as a background git gc packing refs holds it
    release = threading.Timer(0.3, lock.unlink)
    release.start()
    (sb / "d0" / "f0.txt").write_text("edited\n")
    try:
        snap = repo.snapshot(sb, name="main")
    finally:
        release.join()
    assert not snap.unchanged and repo.resolve("main").id == snap.image.id


def test_objects_written_past_the_page_cache_read_back_verified_when_cold(tmp_path):
    """``put(direct=True)`` (the KV layer's pages) writes a large frame past the page cache,
    in a batch as alone; a cold read goes past it too, and is verified like any read."""
    from git_pf.store.directio import evict
    from pagecache_helpers import direct_io_works, flip_byte, resident_pages

    if not direct_io_works(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT; the side store writes through the page cache here")
    store = SideStore(tmp_path / "objects")
    data = [os.urandom(n) for n in (3 * 1024 * 1024 + 5, 200_000, 10)]
    with store.batch():
        oids = [store.put(d, level=1, direct=True) for d in data[:2]]
    oids.append(store.put(data[2], level=1, direct=True))
    big = store.path_for(oids[0])
    assert resident_pages(big) <= 2, "the frame went through the page cache"
    for oid, want in zip(oids, data):
        evict(store.path_for(oid))
        assert store.get(oid) == want
    assert resident_pages(big) <= 2, "the cold read filled the page cache"
    for _ in range(2):  # asking whether a frame is cached must not bring any of it in
        assert store.get(oids[0]) == data[0]
    assert resident_pages(big) <= 2, "a second read went through the page cache"
    # a flipped byte in a cold frame is caught on the read that goes past the cache
    flip_byte(big, 1_000_000)
    evict(big)
    with pytest.raises(CorruptObject):
        store.get(oids[0])


@pytest.mark.parametrize("direct_io", ["on", "off"])
def test_frames_compressed_into_the_write_buffer_are_whole_zstd_frames(tmp_path, monkeypatch, direct_io):
    """A direct put compresses into the thread's write buffer: the file on disk is one zstd
    frame that declares its size and decodes, by a decoder of its own, to the bytes put; the
    same with direct I/O turned off, and for sizes around the aligned cut."""
    if direct_io == "off":
        monkeypatch.setenv("GIT_PF_NO_DIRECT_IO", "1")
    store = SideStore(tmp_path / "objects")
    rng = os.urandom(3 << 20)
    for size in (0, 1, 4095, 64 * 1024 - 1, 64 * 1024 + 1, (1 << 20) + 4096 * 3 + 17, 3 << 20):
        data = (rng[: size // 2] + bytes(size - size // 2))  # half random, half compressible
        oid = store.put(data, level=1, direct=True, window_log=17)
        frame = store.path_for(oid).read_bytes()
        params = zstandard.get_frame_parameters(frame)
        assert params.content_size == size
        assert zstandard.ZstdDecompressor().decompress(frame) == data
        assert store.get(oid) == data
    assert not any((tmp_path / "objects" / "tmp").iterdir())


def test_a_temp_name_left_by_a_killed_writer_is_skipped(tmp_path):
    """Temp files are named by process and counter; one left under the next name (a killed
    writer whose pid came round again) is neither reused nor a failure."""
    from git_pf.store import sidestore

    store = SideStore(tmp_path / "objects")
    store.put(b"first")
    n = next(sidestore._temp_ids)
    stale = tmp_path / "objects" / "tmp" / f"obj-{os.getpid()}-{n + 1}"
    stale.write_bytes(b"left behind")
    oid = store.put(b"second" * 1000)
    assert store.get(oid) == b"second" * 1000
    assert stale.read_bytes() == b"left behind"
