"""Reading side-store blobs straight out of packs: exact bytes, libgit2 fallback for anything
else, and a damaged pack still refused (checkout verifies what it slices out)."""
from __future__ import annotations

import hashlib
import os

import pygit2
import pytest
from dulwich.repo import Repo as DulwichRepo

from git_pf.store.directio import evict
from git_pf.transport import packread, packwrite
from pagecache_helpers import direct_io_works, resident_pages
from transport_helpers import bare, origin_of, pf, rand_bytes, sh, source_repo


def test_blobs_written_as_stored_blocks_read_back_exactly_and_others_fall_back(tmp_path):
    repo = bare(tmp_path / "r.git")
    blobs = [b"", b"x", rand_bytes(65535, 1), rand_bytes(65536, 2), rand_bytes(3 * 1024 * 1024 + 7, 3)]
    ids = packwrite.write_blobs(repo, blobs)
    loose = str(pygit2.Repository(str(repo)).create_blob(b"a loose object"))
    with packread.PackReader(repo) as reader:
        assert [reader.read(i) for i in ids] == blobs
        assert reader.read(loose) is None  # not in a pack: the caller asks libgit2
        assert reader.read("0" * 40) is None
    # git repacks them compressed: no stored blocks any more, so the reader declines
    sh("git", "-c", "pack.compression=9", "repack", "-q", "-a", "-d", "-k", "-F", cwd=repo)
    with packread.PackReader(repo) as reader:
        assert all(reader.read(i) is None for i in ids[2:])
    git = pygit2.Repository(str(repo))
    assert [git[i].data for i in ids] == blobs


def test_other_stored_block_sizes_and_zlib_level_0_read_back_exactly(tmp_path, monkeypatch):
    blobs = [b"", b"y", rand_bytes(999, 4), rand_bytes(1000, 5), rand_bytes(70001, 6)]
    small = bare(tmp_path / "small.git")
    monkeypatch.setattr(packwrite, "_STORED", 1000)  # a writer that cuts 1,000-byte blocks
    ids = packwrite.write_blobs(small, blobs)
    with packread.PackReader(small) as reader:
        assert [reader.read(i) for i in ids] == blobs
    sh("git", "-c", "pack.compression=0", "repack", "-q", "-a", "-d", "-k", "-F", cwd=small)  # git's stored blocks
    with packread.PackReader(small) as reader:
        assert [reader.read(i) for i in ids] == blobs


def test_a_damaged_pack_on_a_local_remote_is_refused_on_checkout(tmp_path):
    a, sb = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    pf("push", "origin", "main", cwd=a)
    # flip one byte inside the data of the remote's pack (a frame of the big file)
    store = a / ".git" / "pf" / "objects"
    frames = sorted(store.glob("??/*"), key=lambda p: p.stat().st_size)
    sample = frames[-1].read_bytes()[1000:1064]
    for pack in (remote / "objects" / "pack").glob("*.pack"):
        data = bytearray(pack.read_bytes())
        at = data.find(sample)
        if at >= 0:
            data[at + 32] ^= 0xFF
            os.chmod(pack, 0o644)
            pack.write_bytes(bytes(data))
            break
    else:
        raise AssertionError("frame not found in the remote's packs")
    pf("clone", f"file://{remote}", tmp_path / "b", cwd=tmp_path)
    proc = pf("checkout", "main", "--into", tmp_path / "c", cwd=tmp_path / "b", check=False)
    victim = frames[-1].parent.name + frames[-1].name
    assert proc.returncode == 3 and "corrupt" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "b" / ".git" / "pf" / "objects" / victim[:2] / victim[2:]).exists()
    assert not (tmp_path / "c").exists()



def test_packs_bypass_the_page_cache_and_are_the_same_valid_packs_either_way(tmp_path, monkeypatch):
    """A pack is written past the page cache where the filesystem allows it (it is made
    durable at once anyway) and read back past it when it is not cached: the bytes, the
    pack's name and git's own check are the same as with ordinary buffered I/O."""
    if not direct_io_works(tmp_path):
        pytest.skip("this filesystem refuses O_DIRECT; packs are written through the page cache here")
    # sizes that cross the 8 MiB staging buffers and leave an unaligned tail
    blobs = [rand_bytes(n, i) for i, n in enumerate([0, 1, 70_000, 5 * 1024 * 1024 + 3, 9 * 1024 * 1024 + 11, 300_001])]
    direct, buffered = bare(tmp_path / "direct.git"), bare(tmp_path / "buffered.git")
    ids = packwrite.write_blobs(direct, blobs)
    (pack,) = (direct / "objects" / "pack").glob("*.pack")
    assert resident_pages(pack) <= 16, "the pack went through the page cache"
    monkeypatch.setenv("GIT_PF_NO_DIRECT_IO", "1")
    assert packwrite.write_blobs(buffered, blobs) == ids
    monkeypatch.delenv("GIT_PF_NO_DIRECT_IO")
    (twin,) = (buffered / "objects" / "pack").glob("*.pack")
    assert pack.name == twin.name and pack.read_bytes() == twin.read_bytes()
    evict(pack)
    sh("git", "verify-pack", str(pack.with_suffix(".idx")), cwd=direct)
    dul = DulwichRepo(str(direct))  # an independent reader agrees on every object
    try:
        assert [dul.object_store[i.encode()].as_raw_string() for i in ids] == blobs
    finally:
        dul.close()
    evict(pack)
    assert resident_pages(pack) <= 2
    with packread.PackReader(direct) as reader:
        assert [reader.read(i) for i in ids] == blobs
    # the large blobs came past the cache: little more than their entry headers is resident
    assert resident_pages(pack) <= 16, "the cold read filled the page cache"
    with packread.PackReader(direct) as reader:  # and a cached pack reads the same
        pack.read_bytes()
        assert [reader.read(i) for i in ids] == blobs


def test_packs_whose_data_ends_anywhere_in_a_staging_buffer_are_valid(tmp_path, monkeypatch):
    """The pack's checksum follows its last byte wherever that falls: with room for it in the
    last staging buffer, without room, and on a buffer's edge."""
    monkeypatch.setattr(packwrite, "_STAGE", 2 * 4096)  # small buffers, so every case occurs
    for n in range(8130, 8200):
        repo = bare(tmp_path / f"r{n}.git")
        blob = rand_bytes(n, n)
        (oid,) = packwrite.write_blobs(repo, [blob])
        (pack,) = (repo / "objects" / "pack").glob("*.pack")
        data = pack.read_bytes()
        assert hashlib.sha1(data[:-20]).digest() == data[-20:] and pack.name == f"pack-{data[-20:].hex()}.pack"
        assert pygit2.Repository(str(repo))[oid].data == blob
    sh("git", "verify-pack", str(pack.with_suffix(".idx")), cwd=repo)
