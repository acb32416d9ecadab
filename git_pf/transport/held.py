"""Side-store objects held as git blobs in this repository, listed by its own ``refs/pf/objects``.

The default adapter brings objects as git blobs: in the pack ``git fetch``
wrote, or in a local remote's pack linked in. They are not copied into
``pf/objects``: ``receive`` records them in this repository's objects index,
in the same format v1 a remote uses (docs/transport.md), which also keeps
the blobs reachable for git's gc. The side store reads them through
``HeldObjects`` (``SideStore.held``) and decodes and checks every frame it
reads, re-hashing it the first time it is read from its blobs (``marks``
remembers that across processes).
Blobs stored as plain deflate blocks are read straight out of the pack file,
anything else through libgit2. Writes git objects, the one ref
``refs/pf/objects`` and (through ``marks``) its re-hash marks; never the
side-store directory.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Iterator

import pygit2

from ..core.errors import CorruptObject, PfError
from . import gitcmd, index as idx, marks, packread

OBJECTS_REF = "refs/pf/objects"
_RETRIES = 5
_RECHECK = 0.1  # seconds between looks at the ref for other processes' writes
_ZERO = "0" * 40


def _tip(git: pygit2.Repository) -> str | None:
    ref = git.references.get(OBJECTS_REF)
    return str(ref.target) if ref is not None else None


def _move_ref(git: pygit2.Repository, new: str | None, old: str | None) -> bool:
    """Compare-and-swap ``refs/pf/objects`` from ``old`` to ``new`` (None: delete it)."""
    args = ["update-ref", "-m", "git-pf objects"]
    args += [OBJECTS_REF, new, old or _ZERO] if new is not None else ["-d", OBJECTS_REF, old or _ZERO]
    return gitcmd.run(Path(git.path), args, check=False).returncode == 0


def add_entries(git: pygit2.Repository, added: idx.Index, data_commit: str) -> tuple[str, idx.Index]:
    """Add ``added`` (whose blobs ``data_commit`` holds) to ``git``'s own objects index, with
    compare-and-swap (rebuilt on the new tip when another writer moved it); returns the new
    tip and the whole index."""
    for _ in range(_RETRIES):
        tip = _tip(git)
        base = idx.read_index(git, tip)
        commit = idx.write_index_commit(git, tip, base, added, data_commit)
        if _move_ref(git, commit, tip):
            return commit, {**base, **added}
    raise PfError(f"updating {OBJECTS_REF} in '{git.path}' kept losing races with other writers; try again")


def _pack_state(git_dir: Path) -> frozenset[str]:
    try:
        return frozenset(p for p in os.listdir(git_dir / "objects" / "pack") if p.endswith(".idx"))
    except OSError:
        return frozenset()


class HeldObjects:
    """The objects this repository's ``refs/pf/objects`` lists, read as side-store frames."""

    def __init__(self, git: pygit2.Repository):
        self.git = git
        self.git_dir = Path(git.path)
        self._lock = threading.Lock()
        self._stamp: tuple | None = None
        self._checked = float("-inf")  # when the ref was last looked at (time.monotonic)
        self._index: idx.Index = {}
        self._packs = packread.PackReader(None)
        self._retired: list[packread.PackReader] = []
        self._pack_state: frozenset[str] = frozenset()
        self._rehashed = marks.Marks(self.git_dir / "pf" / "rehashed")  # (oid, blobs) that hashed to the oid

    # -- the index --------------------------------------------------------
    def _ref_stamp(self) -> tuple:
        out = []
        for p in (self.git_dir / OBJECTS_REF, self.git_dir / "packed-refs"):
            try:
                st = p.stat()
                out.append((st.st_ino, st.st_size, st.st_mtime_ns))
            except OSError:
                out.append(None)
        return tuple(out)

    def _load(self) -> idx.Index:
        """The index, re-read when the ref (or packed-refs) changed; what other processes
        record is looked for at most every ``_RECHECK`` seconds (this one's own writes at once)."""
        now = time.monotonic()
        if now - self._checked < _RECHECK:
            return self._index
        stamp = self._ref_stamp()
        self._checked = now
        if stamp == self._stamp:
            return self._index
        with self._lock:
            try:
                self._index = idx.read_index(self.git, _tip(self.git))
            except (PfError, KeyError, ValueError, pygit2.GitError):
                self._index = {}  # a damaged index holds nothing here; fsck reports it
            self._stamp = stamp
        return self._index

    def _forget(self) -> None:
        """This process moved the ref: read it again on the next look."""
        self._checked = float("-inf")

    def has(self, oid: str) -> bool:
        return oid in self._index or oid in self._load()

    def size(self, oid: str) -> int | None:
        entry = self._load().get(oid)
        return entry.size if entry is not None else None

    def oids(self) -> Iterator[str]:
        return iter(sorted(self._load()))

    def tip_time(self) -> int | None:
        """Commit time of the index tip (when objects were last added), None without one."""
        tip = _tip(self.git)
        return self.git[tip].commit_time if tip is not None else None

    # -- frames -----------------------------------------------------------
    def _refresh_packs(self) -> None:
        with self._lock:
            state = _pack_state(self.git_dir)
            if state != self._pack_state:
                # other threads may still be reading the old reader: it is closed with this object
                self._retired.append(self._packs)
                self._packs, self._pack_state = packread.PackReader(self.git_dir), state

    def _blob(self, blob: str, at_most: int) -> bytes | bytearray | None:
        """The blob's bytes; a compressed one only when its header says at most ``at_most``
        (git compresses blobs: a few MiB in a pack may be gigabytes read), else a GitError."""
        data = self._packs.read(blob)
        if data is None and not self._packs.holds(blob):
            self._refresh_packs()  # a pack that arrived since (fetched or linked)
            data = self._packs.read(blob)
        if data is not None:
            return data
        try:
            size = self.git.odb.read_header(blob)[1]
        except (KeyError, pygit2.GitError):
            size = 0  # a damaged header: the read below reports it as before
        if size > at_most:
            raise pygit2.GitError(f"blob {blob} is {size} bytes, more than the {at_most} its index entry leaves")
        try:
            return self.git.odb.read(blob)[1]
        except KeyError:
            return None

    def _join(self, entry: idx.Entry) -> bytes | bytearray | None:
        """The frame from its blobs, which must add up to the entry's size (GitError otherwise)."""
        parts, got = [], 0
        for b in entry.blobs:
            part = self._blob(b, entry.size - got)
            if part is None:
                return None
            parts.append(part)
            got += len(part)
        if got != entry.size:
            raise pygit2.GitError(f"its blobs hold {got} bytes, its index entry says {entry.size}")
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def frame(self, oid: str) -> bytes | bytearray | None:
        """The zstd frame of ``oid`` as stored (not verified); None when it is not held (or
        its blobs are gone). Looks at the index as last loaded (``has`` reloads it)."""
        found = self.read(oid)
        return found[0] if found is not None else None

    def read(self, oid: str, at_most: int | None = None) -> tuple[bytes | bytearray, marks.Source] | None:
        """``frame`` and where it was read from: ``(oid, its blobs)``, what ``rehashed`` and
        ``mark_rehashed`` take (git blobs are immutable, so a frame read from the same
        blobs again is the same frame, bar damage that its checksum catches). A frame
        listed as larger than ``at_most`` is refused unread (CorruptObject; kept listed,
        since the caller's expectation may be what is wrong), and its blobs are read only
        as far as the listed size (git compresses blobs: a few MiB in a pack may be
        gigabytes read)."""
        entry = self._index.get(oid)
        if entry is None:
            return None
        if at_most is not None and entry.size > at_most:
            raise CorruptObject(f"side-store object {oid} is refused: its stored frame is {entry.size} bytes, "
                                f"more than a frame of the expected content takes ({at_most})")
        try:
            frame = self._join(entry)
        except pygit2.GitError as e:  # a damaged git object (libgit2 checks what it inflates)
            self.discard(oid)
            raise CorruptObject(f"side-store object {oid} is corrupt (git object: {e})") from None
        return (frame, (oid, tuple(entry.blobs))) if frame is not None else None

    def rehashed(self, source: marks.Source) -> bool:
        """Whether a frame read from ``source`` hashed to its name before, in any process."""
        return source in self._rehashed

    def mark_rehashed(self, source: marks.Source) -> None:
        self._rehashed.add(source)

    # -- receiving and dropping ---------------------------------------------
    def receive(self, wanted: idx.Index, source: str) -> None:
        """Record every entry of ``wanted``, whose blobs must be in this repository already
        (CorruptObject, and nothing recorded, otherwise). Frames are verified when read."""
        for oid, entry in wanted.items():
            if any(b not in self.git.odb for b in entry.blobs):
                raise CorruptObject(f"remote '{source}' did not send object {oid}")
        if wanted:
            add_entries(self.git, wanted, idx.write_data_commit(self.git, wanted))
            self._forget()

    def drop(self, oids: set[str]) -> None:
        """Remove ``oids`` from the index (git's gc then prunes blobs nothing else reaches)."""
        for _ in range(_RETRIES):
            tip = _tip(self.git)
            index = idx.read_index(self.git, tip)
            keep = {o: e for o, e in index.items() if o not in oids}
            if len(keep) == len(index):
                return
            new = idx.write_index_commit(self.git, None, {}, keep, idx.write_data_commit(self.git, keep)) \
                if keep else None
            if _move_ref(self.git, new, tip):
                self._forget()
                self._rehashed.prune(lambda s: s[0] in keep and tuple(keep[s[0]].blobs) == s[1])
                return
        raise PfError(f"updating {OBJECTS_REF} kept losing races with other writers; try again")

    def discard(self, oid: str) -> None:
        """Unlist one object found corrupt, so that the next read fetches it again."""
        try:
            self.drop({oid})
        except PfError:
            pass  # still listed: it keeps failing its check on read

    def close(self) -> None:
        for reader in [*self._retired, self._packs]:
            reader.close()
        self._retired = []
