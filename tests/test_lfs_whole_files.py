"""A large file the snapshot hashed goes to an LFS server as one object named by its sha256 (the
hash the snapshot recorded under ``hashed/``, git_pf.store.hashed), with no second pass over it;
a record that is torn, edited or filed under another index is not used, and the bytes are
hashed as any bundle's. Round trips through clone and checkout."""
from __future__ import annotations

import hashlib
import json

import pytest

from git_pf.store import hashed
from lfs_helpers import credentials, giftless_server, push_with_a_corrupt_chunk
from test_transport_lfs import _recorded
from transport_helpers import origin_of, pf, sh, source_repo, tree_files

MiB = 1024 * 1024


@pytest.fixture
def lfs(tmp_path):
    with giftless_server(tmp_path / "server") as server:
        yield server


def _pushed(tmp_path, lfs, name: str, spoil=None):
    """Snapshot a 5 MiB file in a new repository, let ``spoil(records dir)`` change its hash
    record, push it through lfs (bundles of 512 KiB to 2 MiB, so the file is a whole-file
    candidate), clone and check it out: ``(push result, sandbox, records dir)``; the result
    also holds ``recorded``: the side-store objects the remote's store record lists, and sizes."""
    base = tmp_path / name
    base.mkdir()
    a, sb = source_repo(base, 5 * MiB)
    remote = origin_of(a, base)
    credentials(a, lfs)
    sh("git", "config", "pf.lfs.bundleSize", "1m", cwd=a)
    endpoint = lfs.endpoint.replace("/images.git/", f"/{name}.git/")
    pf("remote-store", "origin", "lfs:" + endpoint, cwd=a)
    records = a / ".git" / "pf" / "objects" / hashed.DIR
    if spoil is not None:
        spoil(records)
    result = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    result["recorded"] = _recorded(remote)[0]
    b = base / "b"
    pf("clone", remote, b, cwd=base)
    credentials(b, lfs)
    pf("checkout", "main", "--into", base / "c", cwd=b)
    assert tree_files(base / "c") == tree_files(sb)
    return result, sb, records


def _stored(lfs, name: str) -> dict[str, bytes]:
    root = lfs.storage / "team" / name
    return {p.name: p.read_bytes() for p in root.iterdir()}


def test_a_file_the_snapshot_hashed_goes_whole_under_its_sha256_and_clones_back(tmp_path, lfs):
    result, sb, records = _pushed(tmp_path, lfs, "fast")
    whole = hashlib.sha256((sb / "big.bin").read_bytes()).hexdigest()
    assert len(list(records.iterdir())) == 1  # the snapshot recorded the file's hash
    stored = _stored(lfs, "fast")
    assert stored[whole] == (sb / "big.bin").read_bytes()  # one object: the file, as git-lfs names it
    for oid, data in stored.items():
        assert hashlib.sha256(data).hexdigest() == oid
    # without the record the same objects go, in bundles whose bytes the push hashed
    slow, _, _ = _pushed(tmp_path, lfs, "slow", spoil=lambda d: [p.unlink() for p in d.iterdir()])
    assert slow["objects"] == result["objects"] and slow["sent_bytes"] == result["sent_bytes"]
    assert slow["recorded"] == result["recorded"] and len(result["recorded"]) == result["objects"]
    assert whole not in _stored(lfs, "slow")


def _forge(records, whole: str):
    """Records that name other bytes: ``whole`` in place of the file's hash, with a checksum that
    matches (a forged record) or not (a torn or edited one)."""
    def spoil(d):
        (path,) = d.iterdir()
        size = int(path.read_text().split("\n")[1].split()[1])
        if records == "edited":
            lines = path.read_text().split("\n")
            path.write_text("\n".join([lines[0], f"{whole} {size}", lines[2], ""]))
        elif records == "torn":
            path.write_bytes(path.read_bytes()[:20])
        elif records == "other index":  # a valid record of another chunk index, filed under this one
            path.write_bytes(hashed.encode("0" * 64, whole, size))
    return spoil


@pytest.mark.parametrize("how", ["edited", "torn", "other index"])
def test_a_spoilt_hash_record_is_not_used_and_no_bytes_go_under_a_wrong_name(tmp_path, lfs, how):
    wrong = hashlib.sha256(b"other bytes").hexdigest()
    result, sb, _ = _pushed(tmp_path, lfs, how.replace(" ", "-"), spoil=_forge(how, wrong))
    stored = _stored(lfs, how.replace(" ", "-"))
    assert wrong not in stored and result["sent_objects"] == result["objects"]
    for oid, data in stored.items():  # every object the server holds is named by its bytes
        assert hashlib.sha256(data).hexdigest() == oid
    whole = hashlib.sha256((sb / "big.bin").read_bytes()).hexdigest()
    assert whole not in stored  # the file went in bundles the push hashed


def test_records_decode_only_as_written():
    index, whole = "a" * 64, "b" * 64
    data = hashed.encode(index, whole, 123)
    assert hashed.decode(index, data) == (whole, 123)
    assert hashed.decode("c" * 64, data) is None  # filed under another index
    assert hashed.decode(index, data.replace(b"123", b"124")) is None
    assert hashed.decode(index, data.replace(b"123", b"0123")) is None  # one canonical encoding
    assert hashed.decode(index, data[:-1]) is None and hashed.decode(index, data + b"\n") is None
    assert hashed.decode(index, data.replace(b"pf-hashed 1", b"pf-hashed 2")) is None


@pytest.mark.parametrize("cached", [True, False], ids=["in-place", "decoded"])
def test_a_corrupt_chunk_of_a_whole_file_stops_its_upload_before_the_server_takes_it(tmp_path, lfs, cached):
    """The whole file goes out as its chunks are read, each checked by its frame's checksum (in
    place when it is stored raw and in the page cache, else as it is decoded): a chunk whose
    frame no longer matches ends the PUT short, and no image ref moves."""
    a, sb = source_repo(tmp_path, 5 * MiB)
    whole = hashlib.sha256((sb / "big.bin").read_bytes()).hexdigest()
    remote = origin_of(a, tmp_path)
    credentials(a, lfs)
    sh("git", "config", "pf.lfs.bundleSize", "1m", cwd=a)
    pf("remote-store", "origin", "lfs:" + lfs.endpoint, cwd=a)
    push_with_a_corrupt_chunk(a, remote, cached)
    assert whole not in lfs.uploads()  # the server took no PUT of it (the small objects may have gone)


def test_a_file_written_to_while_it_is_chunked_gets_no_record(tmp_path):
    """The record must name the bytes the chunks hold: a file that changes while the snapshot
    reads it (here: written to as its first chunk is stored) gets none; one that does not, does."""
    import mmap
    import os
    import random

    from git_pf.store.sidestore import SideStore

    import threading

    class Written(SideStore):
        taking = threading.Lock()  # chunks are stored on several threads: one of them writes

        def put(self, data, *args, **kwargs):
            with self.taking:
                writer, self.writer = self.writer, None
            if writer is not None:
                os.pwrite(writer, b"changed", 0)  # in place (its times change), and
                os.pwrite(writer, b"more", 3 * MiB)  # longer, where timestamps are coarse
            return super().put(data, *args, **kwargs)

    path = tmp_path / "big.bin"
    for change in (False, True):
        path.write_bytes(random.Random(3).randbytes(3 * MiB))
        store = Written(tmp_path / f"objects-{change}")
        with open(path, "r+b") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            store.writer = f.fileno() if change else None
            large = store.put_large(mm, f.fileno())
        assert large.index_oid is not None
        assert store.hashed([large.index_oid]) == ({} if change else {large.index_oid: (large.oid, large.size)})
    # bytes cannot change; a mapping without its file is not trusted
    data = random.Random(4).randbytes(3 * MiB)
    store = SideStore(tmp_path / "objects-bytes")
    large = store.put_large(data)
    assert store.hashed([large.index_oid]) == {large.index_oid: (hashlib.sha256(data).hexdigest(), len(data))}
    store = SideStore(tmp_path / "objects-view")
    large = store.put_large(memoryview(bytearray(data)))
    assert store.hashed([large.index_oid]) == {}
