"""Reading side-store blobs straight out of packs: exact bytes, libgit2 fallback for anything
else, and a damaged pack still refused (checkout verifies what it slices out)."""
from __future__ import annotations

import os

import pygit2

from git_pf.transport import packread, packwrite
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
