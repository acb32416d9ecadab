"""How the lfs adapter groups side-store objects into bundles (git_pf.transport.lfsbundle):
bounded sizes, large objects alone, the same cuts for the same objects, and cuts that
resynchronise after an insertion, so a re-run or a later push finds bundles the server has."""
from __future__ import annotations

import hashlib
import random

import pytest

from git_pf.errors import CorruptObject
from git_pf.transport import lfsbundle

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
    assert lfsbundle.cut_out(body, 0, members, "b" * 64, "host") == list(zip(oids, parts))
    # a range of the bundle: only the members wholly inside it
    start = unit.offsets()[1]
    part = body[start:unit.offsets()[3] + 10]
    assert [o for o, _ in lfsbundle.cut_out(part, start, members, "b" * 64, "host")] == oids[1:3]
    lying = [(oids[0], 1, unit.sizes[0])]  # a record that puts an object at the wrong place
    with pytest.raises(CorruptObject, match="in bundle b+ from the lfs server at host is corrupt"):
        lfsbundle.cut_out(body, 0, lying, "b" * 64, "host")
