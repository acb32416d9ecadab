"""How the lfs adapter groups side-store objects into bundles (git_pf.transport.lfsbundle):
bounded sizes, large objects alone, the same cuts for the same objects, and cuts that
resynchronise after an insertion, so a re-run or a later push finds bundles the server has."""
from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys

import pytest

from git_pf.core.errors import CorruptObject, DataError
from git_pf.transport import lfsbundle, storerecord

KiB, MiB = 1024, 1024 * 1024


def _objects(n: int, seed: int) -> tuple[list[str], dict[str, int]]:
    rng = random.Random(seed)
    oids = [hashlib.sha256(f"{seed}/{i}".encode()).hexdigest() for i in range(n)]
    return oids, {o: rng.randint(128 * KiB, 2 * MiB) for o in oids}


def test_every_object_goes_once_and_bundles_stay_within_bounds():
    oids, sizes = _objects(3000, 1)
    sizes[oids[10]] = 40 * MiB  # a large object: alone
    units = lfsbundle.plan(oids, sizes, 16 * MiB)
    assert sorted(o for u in units for o in u.members) == sorted(oids)  # each exactly once
    assert lfsbundle.Unit((oids[10],), (40 * MiB,)) in units
    bundles = [u for u in units if u.bundled]
    assert all(u.size <= 32 * MiB for u in bundles)
    assert all(u.size >= 8 * MiB for u in bundles[:-1] if oids[10] not in u.members)
    mean = sum(u.size for u in bundles) / len(bundles)
    assert 10 * MiB < mean < 24 * MiB  # about the target


def test_the_same_objects_cut_the_same_bundles_and_an_insertion_moves_only_its_neighbours():
    oids, sizes = _objects(2000, 2)
    first = lfsbundle.plan(oids, sizes, 4 * MiB)
    assert lfsbundle.plan(list(oids), dict(sizes), 4 * MiB) == first
    extra, extra_sizes = _objects(5, 3)
    changed = oids[:1000] + extra + oids[1000:]
    second = lfsbundle.plan(changed, {**sizes, **extra_sizes}, 4 * MiB)
    same = set(first) & set(second)
    assert len(same) >= len(first) - 4  # all but the bundles around the insertion


def test_members_are_cut_out_of_a_body_by_offset_and_each_is_re_hashed():
    parts = [bytes([i]) * (1000 + i) for i in range(5)]
    oids = [hashlib.sha256(p).hexdigest() for p in parts]
    unit = lfsbundle.Unit(tuple(oids), tuple(map(len, parts)))
    body = b"".join(parts)
    members = list(zip(oids, unit.offsets(), unit.sizes))
    assert [(o, bytes(d)) for o, d in lfsbundle.cut_out(body, 0, members, set(oids), "b" * 64, "host")] == \
        list(zip(oids, parts))
    # a range of the bundle: only the members wholly inside it
    start = unit.offsets()[1]
    part = body[start:unit.offsets()[3] + 10]
    assert [o for o, _ in lfsbundle.cut_out(part, start, members, set(oids), "b" * 64, "host")] == oids[1:3]
    lying = [(oids[0], 1, unit.sizes[0]), (oids[1], unit.offsets()[1], unit.sizes[1])]  # one at the wrong place
    with pytest.raises(CorruptObject, match="in bundle b+ from the lfs server at host is corrupt"):
        lfsbundle.cut_out(body, 0, lying, {oids[0]}, "b" * 64, "host")
    # a lie about a member not asked for leaves it out, and the wanted one still comes
    assert [o for o, _ in lfsbundle.cut_out(body, 0, lying, {oids[1]}, "b" * 64, "host")] == [oids[1]]


def test_objects_named_without_pointers_come_in_the_same_order_in_every_process(tmp_path):
    """Model and cache layers name side-store objects in a set: the push order (and so the
    bundles a re-run cuts) must not follow the process's string hashing."""
    script = ("import json, sys, pathlib; from git_pf.transport import reach; "
              "from git_pf.store.sidestore import SideStore; "
              "r = reach.Reach(extra={str(i) * 64 for i in range(1, 10)} | {f'{i:064x}' for i in range(40)}); "
              "print(json.dumps(list(reach.objects_of(SideStore(pathlib.Path(sys.argv[1])), r))))")
    orders = {subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONHASHSEED=str(seed))).stdout for seed in (1, 2, 3)}
    assert len(orders) == 1 and len(json.loads(orders.pop())) == 49


def test_a_record_whose_bundle_is_also_an_object_or_too_large_is_refused():
    a, b, bundle = "a" * 64, "b" * 64, "c" * 64
    storerecord.check_bundles({a: 10, b: 10}, {a: (bundle, 20, 0), b: (bundle, 20, 10)}, "r")
    with pytest.raises(DataError, match="does not fit its bundle"):  # the bundle listed as an object too
        storerecord.check_bundles({a: 10, b: 10, bundle: 20}, {a: (bundle, 20, 0), b: (bundle, 20, 10)}, "r")
    with pytest.raises(DataError, match="does not fit its bundle"):  # larger than any bundle is cut
        storerecord.check_bundles({a: 10}, {a: (bundle, storerecord.MAX_BUNDLE + 1, 0)}, "r")
    with pytest.raises(DataError, match="does not fit its bundle"):  # two sizes for one bundle
        storerecord.check_bundles({a: 10, b: 10}, {a: (bundle, 20, 0), b: (bundle, 30, 10)}, "r")


def test_a_member_decoded_into_a_reused_buffer_is_checked_as_a_plain_read_is(tmp_path):
    """The push decodes bundle members into buffers it uses again (``SideStore.get(into=)``):
    the bytes are the object's, and a frame whose checksum or length is wrong is refused."""
    from git_pf.store.sidestore import SideStore

    store = SideStore(tmp_path / "objects")
    data = random.Random(5).randbytes(300 * KiB)
    oid = store.put(data)
    buf = bytearray(b"x" * (512 * KiB))  # larger than the object, and not empty
    assert bytes(store.get(oid, size=len(data), into=buf)) == data == store.get(oid, size=len(data))
    path = store.path_for(oid)
    frame = bytearray(path.read_bytes())
    path.chmod(0o644)
    for broken in (frame[:len(frame) // 2] + bytes([frame[len(frame) // 2] ^ 1]) + frame[len(frame) // 2 + 1:],
                   frame[:-4] + bytes(b ^ 1 for b in frame[-4:]),  # its checksum
                   frame[:-200]):  # cut short
        path.write_bytes(bytes(broken))
        with pytest.raises(CorruptObject, match="is corrupt"):
            store.get(oid, size=len(data), into=buf)


def test_a_body_cut_as_it_arrives_keeps_what_cut_out_keeps_and_holds_little():
    """Bundles are cut as their body arrives (``Cutter``): the same members as ``cut_out`` of
    the whole body, from a range too, however the pieces fall, and never the body at once."""
    rng = random.Random(7)
    parts = [rng.randbytes(rng.randint(1, 3000)) for _ in range(60)]
    oids = [hashlib.sha256(p).hexdigest() for p in parts]
    unit = lfsbundle.Unit(tuple(oids), tuple(map(len, parts)))
    body = b"".join(parts)
    members = list(zip(oids, unit.offsets(), unit.sizes))
    for start in (0, unit.offsets()[7] + 5):
        expected = [(o, bytes(d)) for o, d in lfsbundle.cut_out(body[start:], start, members, set(), "b" * 64, "h")]
        for seed in range(3):
            kept, calls = [], []
            cut = lfsbundle.Cutter(members, set(), "b" * 64, "h", lambda run: (kept.extend(run), calls.append(run)),
                                   flush=10_000)
            cut.begin(start)
            at, held = start, 0
            pick = random.Random(seed)
            while at < len(body):
                n = pick.randint(1, 5000)
                cut.feed(body[at:at + n])
                held = max(held, len(cut.pending))
                at += n
            cut.end()
            assert kept == expected and len(calls) > 1
            assert held <= 3000 + 5000  # one member and one piece at most
    # a wanted member that does not hash to its name stops the cut
    spoilt = bytearray(body)
    spoilt[unit.offsets()[3]] ^= 1
    cut = lfsbundle.Cutter(members, {oids[3]}, "b" * 64, "host", lambda run: None)
    with pytest.raises(CorruptObject, match="in bundle b+ from the lfs server at host is corrupt"):
        cut.feed(bytes(spoilt))


def test_a_whole_file_goes_as_one_unit_named_by_its_hash_only_when_all_its_chunks_go():
    oids, sizes = _objects(40, 4)
    whole, other = "f" * 64, "e" * 64
    file_chunks = tuple(oids[5:25])
    units = lfsbundle.plan(oids, sizes, 4 * MiB, [(whole, file_chunks), (other, tuple(oids[20:30]))])
    assert units[0] == lfsbundle.Unit(file_chunks, tuple(sizes[o] for o in file_chunks), whole)
    assert sorted(o for u in units for o in u.members) == sorted(oids)  # each once: the second file's
    assert all(u.name is None for u in units[1:])  # chunks went with the first, so it is not whole
    # a file one of whose chunks the remote has goes in bundles (what it lacks only)
    assert all(u.name is None for u in lfsbundle.plan(oids[6:], sizes, 4 * MiB, [(whole, file_chunks)]))
    # and one under half the target is bundled with the rest
    assert all(u.name is None for u in lfsbundle.plan(oids, sizes, 64 * MiB, [(whole, file_chunks)]))
