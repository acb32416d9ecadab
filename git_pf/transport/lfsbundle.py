"""Bundles: many small side-store objects sent to a Git LFS server as one LFS object.

LFS servers are built for a few large objects: each object costs a batch entry,
a PUT, a verify and later a GET, every one a round trip (often on a new
connection), and hosts rate-limit the batch API. A large file in the side
store is thousands of ~512 KiB chunks, so the lfs adapter sends objects
smaller than half of ``pf.lfs.bundleSize`` (default 16 MiB) as bundles: a
bundle's bytes are its members' raw bytes one after the other, its LFS oid
their sha256, so the server checks it like any object.

Where a bundle ends is chosen by content: once it holds half the target, each
member ends it with a chance proportional to its size (decided by the member's
own hash), and it always ends before it would pass twice the target. The same
objects in the same order cut the same bundles, so a push re-run after a kill
sends bundles the server already holds (and it says so), and objects added
before or after shift only the bundles next to them. Objects of half the target
or more, and a bundle of one member, go alone under their own oid. Which
object lies where is kept in the store record (``storerecord``, ``bundles/``).

A large file of half the target or more whose chunks all go, and whose whole
content this repository's own store hashed when it chunked it (``hashed``),
goes as one bundle of its chunks in order: its bytes are the file's, so its
LFS oid is the file's sha256, known without reading them again (as git-lfs
would name the same file).
Members read back, from a whole bundle or a byte range of it, are each
re-hashed. Pure: no I/O.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..core.errors import CorruptObject

DEFAULT_TARGET = 16 * 1024 * 1024
MIN_TARGET = 64 * 1024
MAX_TARGET = 1 << 30  # bundles stay under twice this (storerecord.MAX_BUNDLE)
MAX_WHOLE = 2 * MAX_TARGET  # a whole file goes as one bundle up to this size
_SCALE = 1 << 48  # a member's hash, read as a 48-bit number, decides its cut


@dataclass(frozen=True)
class Unit:
    """One LFS object to send: ``members`` (oids, in order) with their ``sizes``. A single
    member goes under its own oid; several go as a bundle."""
    members: tuple[str, ...]
    sizes: tuple[int, ...]
    name: str | None = None  # the LFS oid, when known without hashing (a whole file's, ``hashed``)

    @property
    def bundled(self) -> bool:
        return len(self.members) > 1

    @property
    def size(self) -> int:
        return sum(self.sizes)

    def offsets(self) -> list[int]:
        out, at = [], 0
        for n in self.sizes:
            out.append(at)
            at += n
        return out


def plan(oids: list[str], sizes: dict[str, int], target: int = DEFAULT_TARGET,
         wholes: list[tuple[str, tuple[str, ...]]] = ()) -> list[Unit]:
    """The LFS objects that carry ``oids`` (in that order), each of their ``sizes``. ``wholes``:
    ``(whole oid, its chunks in order)`` of large files hashed locally; each of at least half
    the target and at most ``MAX_WHOLE`` whose chunks are all among ``oids`` (and in no whole
    before it) goes first, as one unit named by its whole oid."""
    low, high = target // 2, target * 2
    units: list[Unit] = []
    left = set(oids)
    for whole, chunks in wholes:
        total = sum(sizes.get(c, 0) for c in chunks)
        if len(chunks) > 1 and low <= total <= MAX_WHOLE and all(c in left for c in set(chunks)):
            units.append(Unit(tuple(chunks), tuple(sizes[c] for c in chunks), whole))
            left.difference_update(chunks)
    if len(left) < len(oids):
        oids = [o for o in oids if o in left]
    members: list[str] = []
    total = 0

    def close() -> None:
        nonlocal members, total
        if members:
            units.append(Unit(tuple(members), tuple(sizes[o] for o in members)))
        members, total = [], 0

    for oid in oids:
        n = sizes[oid]
        if n >= low:
            units.append(Unit((oid,), (n,)))
            continue
        if members and total + n > high:
            close()
        members.append(oid)
        total += n
        if total >= low and _cuts(oid, n, target - low):
            close()
    close()
    return units


def _cuts(oid: str, size: int, span: int) -> bool:
    """Whether a bundle ends after member ``oid`` of ``size`` bytes: chance ``size / span``."""
    return int(oid[:12], 16) * span < size * _SCALE


def members_of(bundles: dict[str, tuple[str, int, int]]) -> dict[str, list[tuple[str, int]]]:
    """``{bundle: [(member, offset), ...]}`` by offset, from the record's ``{member: (bundle,
    bundle bytes, offset)}``."""
    out: dict[str, list[tuple[str, int]]] = {}
    for oid, (bundle, _, offset) in bundles.items():
        out.setdefault(bundle, []).append((oid, offset))
    for members in out.values():
        members.sort(key=lambda m: m[1])
    return out


def cut_out(body, start: int, members: list[tuple[str, int, int]], wanted: set[str], bundle: str,
            host: str) -> list[tuple[str, memoryview]]:
    """The members ``(oid, offset, size)`` that lie wholly in ``body`` (bytes ``start`` on of
    ``bundle``), each re-hashed: ``[(oid, bytes)]``, views into ``body``. A wanted member
    that does not hash to its name is CorruptObject; another is left out (a record that lies
    about a neighbour does not keep the wanted ones from coming)."""
    out = []
    view = memoryview(body)
    for oid, offset, size in members:
        lo = offset - start
        if lo < 0 or lo + size > len(body):
            continue
        data = view[lo:lo + size]
        if hashlib.sha256(data).hexdigest() == oid:
            out.append((oid, data))
        elif oid in wanted:
            raise CorruptObject(f"side-store object {oid} in bundle {bundle} from the lfs server at {host} is "
                                f"corrupt (its bytes do not hash to its name); nothing of the bundle was stored")
    return out


class Cutter:
    """``cut_out`` for a body that arrives in pieces: each member ``(oid, offset, size)`` that
    lies wholly in the body is re-hashed as soon as its last byte is in, and handed to
    ``keep([(oid, bytes)])`` in runs of about ``flush`` bytes (and at ``end``), so only a
    member and a run are held, never the whole bundle (a whole file can be one). A wanted
    member that does not hash to its name is CorruptObject; another is left out."""

    def __init__(self, members: list[tuple[str, int, int]], wanted: set[str], bundle: str, host: str, keep,
                 flush: int = 16 << 20):
        self.members = sorted(members, key=lambda m: m[1])
        self.wanted, self.bundle, self.host, self.keep, self.flush = wanted, bundle, host, keep, flush
        self.begin(0)

    def begin(self, start: int) -> None:
        """The body starts at byte ``start`` of the bundle (again, after a retry)."""
        self.pos, self.pending, self.ready, self.held = start, bytearray(), [], 0
        self.next = next((i for i, m in enumerate(self.members) if m[1] >= start), len(self.members))

    def feed(self, piece) -> None:
        self.pending += piece
        end = self.pos + len(self.pending)
        while self.next < len(self.members) and self.members[self.next][1] + self.members[self.next][2] <= end:
            oid, offset, size = self.members[self.next]
            self.next += 1
            data = bytes(memoryview(self.pending)[offset - self.pos:offset - self.pos + size])
            if hashlib.sha256(data).hexdigest() == oid:
                self.ready.append((oid, data))
                self.held += size
            elif oid in self.wanted:
                raise CorruptObject(f"side-store object {oid} in bundle {self.bundle} from the lfs server at "
                                    f"{self.host} is corrupt (its bytes do not hash to its name); nothing of the "
                                    f"bundle was stored")
        keep_from = self.members[self.next][1] if self.next < len(self.members) else end
        drop = min(keep_from, end) - self.pos
        if drop > 0:
            del self.pending[:drop]
            self.pos += drop
        if self.held >= self.flush:
            self._flush()

    def _flush(self) -> None:
        ready, self.ready, self.held = self.ready, [], 0
        if ready:
            self.keep(ready)

    def end(self) -> None:
        """The body is all in: hand over what is left."""
        self._flush()
