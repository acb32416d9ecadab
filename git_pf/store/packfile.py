"""git's pack format: writing new objects as packs + version-2 indexes, and nothing else.

A snapshot of thousands of files would otherwise cost one loose-object file
(create, write, rename) per blob and tree. ``PackWriter`` buffers new
objects, zlib-compressed, and writes them as ``objects/pack/pack-<sha>.pack``
+ ``.idx`` in one go, the pack before its index so readers never see a
partial pack. Both are staged under names unique to the writer
(``tmp_pack_*``, ``tmp_idx_*``, as git names its own), so two writers of
byte-identical packs never collide, and a pack that already exists counts as
written. ``packing`` makes every ``TreeWriter`` of a thread queue into one
writer (a snapshot is one pack, its commit included); ``RunPackWriter`` is
the writer of a long run: a pack per flush, merged geometrically so a run of
any length leaves a handful of packs. git-pf writes no loose objects on
these paths, so a ``git gc`` running at the same time (which removes empty
``objects/xx`` directories and the loose objects it packed) has nothing of
ours to pull away (docs/format.md, "Writing objects"). Knows only git's
object and pack formats; no refs, no images.
"""
from __future__ import annotations

import hashlib
import os
import struct
import tempfile
import threading
import zlib
from contextlib import contextmanager
from pathlib import Path

import pygit2

from ..core.errors import WriteFailed
from ..core.gitdir import common_dir

KIND_NAMES = {1: b"commit", 2: b"tree", 3: b"blob", 4: b"tag"}
COMMIT, BLOB, TREE = 1, 3, 2
_FLUSH_BYTES = 256 * 1024 * 1024  # start another pack past this much compressed data
_LOOKAHEAD = 262  # zlib's MIN_LOOKAHEAD: a window of 2**wbits reaches back 2**wbits - 262 bytes
_COPY = 1 << 20  # a merge copies entries in pieces of at most this many bytes
FAILPOINT_ENV = "GIT_PF_FAIL_PACK_WRITE"  # "N" / "N-M": the N-th pack write (merges count) and later / to the M-th fail
STOP_ENV = "GIT_PF_STOP_PACK_WRITE"  # "N:FIFO": the N-th pack write stops between its pack and its index
_scope = threading.local()
_writes = [0]  # pack writes this process attempted (for the failpoint)


def object_id(kind: int, data) -> bytes:
    """The raw SHA-1 git gives an object of ``kind`` holding ``data``."""
    h = hashlib.sha1(b"%s %d\x00" % (KIND_NAMES[kind], len(data)))
    h.update(data)
    return h.digest()


def deflate(data: bytes) -> bytes:
    """zlib level 1 with a window no larger than the data needs: the same output size as
    the full 32 KiB window, but small objects (trees) set up 2-3x faster."""
    return zlib.compress(data, 1, min(15, max(9, (len(data) + _LOOKAHEAD).bit_length())))


def commit_bytes(author: pygit2.Signature, committer: pygit2.Signature, message: str, tree: str,
                 parents: list) -> bytes:
    """A commit object's bytes, as ``git commit-tree`` writes them (no encoding header: UTF-8)."""
    def who(sig: pygit2.Signature) -> bytes:
        off = sig.offset
        sign, off = ("-", -off) if off < 0 else ("+", off)
        return b"%s <%s> %d %s%02d%02d" % (sig.raw_name, sig.raw_email, sig.time, sign.encode(), off // 60, off % 60)
    head = [b"tree " + str(tree).encode()] + [b"parent " + str(p).encode() for p in parents]
    head += [b"author " + who(author), b"committer " + who(committer)]
    return b"\n".join(head) + b"\n\n" + message.encode()


def add_commit(pack: "PackWriter", author: pygit2.Signature, committer: pygit2.Signature, message: str, tree,
               parents: list) -> str:
    """Queue an unsigned commit into ``pack`` (the same object ``create_commit`` writes); its id."""
    return pack.add(COMMIT, commit_bytes(author, committer, message, str(tree), [str(p) for p in parents])).hex()


def entry_header(kind: int, size: int) -> bytes:
    """A pack entry's type-and-size varint header."""
    out = bytearray()
    byte = (kind << 4) | (size & 0x0F)
    size >>= 4
    while size:
        out.append(byte | 0x80)
        byte = size & 0x7F
        size >>= 7
    out.append(byte)
    return bytes(out)


def idx_bytes(entries: list[tuple[bytes, int, int]], pack_sum: bytes) -> bytes:
    """A version-2 pack index for ``(raw oid, crc32, offset)`` entries."""
    entries = sorted(entries)
    counts, total = [], 0
    fanout = [0] * 256
    for sha, _, _ in entries:
        fanout[sha[0]] += 1
    for n in fanout:
        total += n
        counts.append(total)
    small, large = [], []
    for _, _, off in entries:
        if off < 0x80000000:
            small.append(off)
        else:
            small.append(0x80000000 | len(large))
            large.append(off)
    body = b"".join([
        b"\xfftOc", struct.pack(">I", 2), struct.pack(">256I", *counts),
        b"".join(sha for sha, _, _ in entries),
        b"".join(struct.pack(">I", crc) for _, crc, _ in entries),
        b"".join(struct.pack(">I", o) for o in small),
        b"".join(struct.pack(">Q", o) for o in large),
        pack_sum,
    ])
    return body + hashlib.sha1(body).digest()


class PackWriter:
    """Buffers new objects and writes them as packs into a repository's object database."""

    def __init__(self, repo: pygit2.Repository):
        self.repo = repo
        self.pack_dir = Path(common_dir(repo.path)) / "objects" / "pack"
        self._objects: dict[bytes, tuple[int, bytes]] = {}  # raw oid -> (kind, packed entry bytes)
        self._bytes = 0

    def add(self, kind: int, data: bytes) -> bytes:
        """Queue ``data`` as an object of ``kind`` unless the repository or the queue has it."""
        oid = object_id(kind, data)
        if oid in self._objects or pygit2.Oid(raw=oid) in self.repo.odb:
            return oid
        entry = entry_header(kind, len(data)) + deflate(data)
        self._objects[oid] = (kind, entry)
        self._bytes += len(entry)
        if self._bytes >= _FLUSH_BYTES:
            self.flush()
        return oid

    def has(self, oid: bytes) -> bool:
        """Whether object ``oid`` (raw) is queued here or in the repository."""
        return oid in self._objects or pygit2.Oid(raw=oid) in self.repo.odb

    def flush(self) -> Path | None:
        """Write what is queued as one pack and its index; the pack's path without suffix (None:
        nothing was queued). On failure (WriteFailed) the queue is kept, so a later flush retries it."""
        if not self._objects:
            return None
        try:
            stem = self._write(self._objects)
        except OSError as e:
            raise WriteFailed(f"cannot write to the git object database: {e.strerror or e}") from None
        self._objects, self._bytes = {}, 0
        return stem

    def _write(self, objects: dict[bytes, tuple[int, bytes]]) -> Path:
        return write_pack(self.pack_dir, ((oid, entry) for oid, (_, entry) in objects.items()), len(objects))


def _failpoint() -> None:
    """A pack write that fails on purpose (``GIT_PF_FAIL_PACK_WRITE=N``: the N-th and every later
    one; ``N-M``: the N-th to the M-th): tests and the soak harness make storage trouble at a known
    point with it."""
    _writes[0] += 1
    first, _, last = os.environ.get(FAILPOINT_ENV, "").partition("-")
    if first.isdigit() and (not last or last.isdigit()) and int(first) <= _writes[0] <= int(last or _writes[0]):
        raise OSError(28, "No space left on device (GIT_PF_FAIL_PACK_WRITE)")


def _stop_point() -> None:
    """``GIT_PF_STOP_PACK_WRITE=N:FIFO``: at the N-th pack write, when a reader has FIFO open, write
    this process's id into it and wait there for good: a kill test stops the writer at exactly this
    point, with its pack in place and its index not yet. With no reader waiting it goes on."""
    at, _, fifo = os.environ.get(STOP_ENV, "").partition(":")
    if fifo and at.isdigit() and _writes[0] == int(at):
        try:
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            return
        os.write(fd, f"{os.getpid()}\n".encode())
        os.close(fd)
        threading.Event().wait()


def write_pack(pack_dir: Path, entries, count: int) -> Path:
    """Write ``count`` ``(raw oid, pack entry bytes)`` as a pack + index under ``pack_dir``; the
    pack's path without suffix. Staged under names unique to this call and renamed pack first,
    index last; where the index is there already (a writer of the same pack was first) the
    pack is taken as written."""
    _failpoint()
    pack_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=pack_dir, prefix="tmp_pack_")
    idx_tmp = None
    try:
        index, offset = [], 12
        digest = hashlib.sha1()
        with os.fdopen(fd, "wb") as f:
            head = b"PACK" + struct.pack(">II", 2, count)
            f.write(head)
            digest.update(head)
            for oid, entry in entries:
                crc = 0
                for piece in entry if isinstance(entry, list) else (entry,):
                    f.write(piece)
                    digest.update(piece)
                    crc = zlib.crc32(piece, crc)
                index.append((oid, crc, offset))
                offset += sum(map(len, entry)) if isinstance(entry, list) else len(entry)
            pack_sum = digest.digest()
            f.write(pack_sum)
        stem = pack_dir / f"pack-{pack_sum.hex()}"
        idx = stem.with_suffix(".idx")
        if idx.exists():  # the same objects in the same order: another writer wrote this pack
            return stem
        fd, idx_tmp = tempfile.mkstemp(dir=pack_dir, prefix="tmp_idx_")
        with os.fdopen(fd, "wb") as f:
            f.write(idx_bytes(index, pack_sum))
        os.chmod(tmp, 0o444)
        os.chmod(idx_tmp, 0o444)
        os.replace(tmp, stem.with_suffix(".pack"))
        _stop_point()
        os.replace(idx_tmp, idx)
        return stem
    finally:
        Path(tmp).unlink(missing_ok=True)
        if idx_tmp is not None:
            Path(idx_tmp).unlink(missing_ok=True)


def read_index(data: bytes) -> list[tuple[int, bytes, int]]:
    """``(offset, raw oid, crc32)`` of every entry of a version-2 pack index, by offset;
    ValueError when ``data`` is no such index."""
    if len(data) < 8 + 1024 + 40 or data[:8] != b"\xfftOc\x00\x00\x00\x02":
        raise ValueError("not a version-2 pack index")
    n = struct.unpack_from(">I", data, 8 + 255 * 4)[0]
    oids_at = 8 + 1024
    crcs_at = oids_at + 20 * n
    offs_at = crcs_at + 4 * n
    large_at = offs_at + 4 * n
    if len(data) < large_at + 40:
        raise ValueError("pack index is truncated")
    out = []
    for i in range(n):
        off = struct.unpack_from(">I", data, offs_at + 4 * i)[0]
        if off & 0x80000000:
            off = struct.unpack_from(">Q", data, large_at + 8 * (off & 0x7FFFFFFF))[0]
        out.append((off, data[oids_at + 20 * i: oids_at + 20 * i + 20], struct.unpack_from(">I", data, crcs_at + 4 * i)[0]))
    out.sort()
    return out


class RunPackWriter(PackWriter):
    """The writer of a long run (a recording's steps): every ``flush`` writes a pack, so what it
    queued is durable before the caller moves a ref; then the packs this writer wrote are merged
    geometrically (the newest two while the older is less than twice the newer's size), so a
    run of N flushes leaves about log2(N) packs, and ``consolidate`` makes the small ones one at
    the run's end. A pack of ``MERGE_OBJECTS`` objects or more is merged no further, during the
    run or at its end (a 10,000-step run keeps a pack per ~600 steps): a merge holds a few Python
    objects per object it copies, and merging the whole run so far made that peak grow with
    the run, and the recorder's memory with it (the allocator keeps the arenas a peak needed). A merge copies the entries as they are (no inflate, no deflate) into a new pack,
    then removes the packs it merged; one that ``git gc`` already took is left out (its objects
    are in gc's pack). Every ``FORGET_AFTER`` packs merged away the repository gets a fresh object
    database, so the process does not keep them open (``_forget``)."""

    FORGET_AFTER = 128  # merged-away packs after which the repository gets a fresh object database
    MERGE_OBJECTS = 4096  # a pack this big is merged again only by ``consolidate``

    def __init__(self, repo: pygit2.Repository):
        super().__init__(repo)
        self.packs: list[tuple[Path, int, int]] = []  # (pack path without suffix, bytes, objects), oldest first
        self._removed = 0

    def flush(self) -> Path | None:
        count = len(self._objects)
        stem = super().flush()
        if stem is not None:
            self.packs.append((stem, _size(stem), count))
            while len(self.packs) >= 2 and self.packs[-2][2] < self.MERGE_OBJECTS \
                    and self.packs[-2][1] < 2 * self.packs[-1][1]:
                if not self._merge(2):
                    break  # no room for the merged pack (a full disk): the packs stay as they are
        return stem

    def consolidate(self) -> None:
        """At the run's end: merge the packs under ``MERGE_OBJECTS`` objects that follow the last full
        one into one (best effort: a failure leaves them as they are; objects still queued stay
        queued). Full packs stay as they are, so the end costs no more memory than a merge during
        the run: a run leaves a pack per ``MERGE_OBJECTS`` objects and one more, which git's own gc
        folds together later, between commands."""
        try:
            self.flush()
        except WriteFailed:
            pass
        tail = 0
        while tail < len(self.packs) and self.packs[-1 - tail][2] < self.MERGE_OBJECTS:
            tail += 1
        if tail >= 2:
            self._merge(tail)

    def _merge(self, k: int) -> bool:
        """Merge the newest ``k`` packs; False when that failed (they stay as they are: still a
        complete object database, only more packs)."""
        olds = self.packs[-k:]
        try:
            stem = merge_packs(self.pack_dir, [s for s, _, _ in olds])
        except (OSError, ValueError):
            return False
        self.packs[-k:] = [(stem, _size(stem), sum(n for _, _, n in olds))] if stem is not None else []
        self._removed += k
        if self._removed >= self.FORGET_AFTER:
            self._forget()
        return True

    def _forget(self) -> None:
        """libgit2 keeps every pack it ever opened open and mapped, removed ones too: a fresh object
        database for the repository closes them (fds, maps, the disk space of removed packs). The
        caller's lock must keep other threads off this ``pygit2.Repository`` meanwhile."""
        self._removed = 0
        self.repo.set_odb(pygit2.Odb(str(Path(common_dir(self.repo.path)) / "objects")))


def _size(stem: Path) -> int:
    try:
        return stem.with_suffix(".pack").stat().st_size
    except OSError:
        return 0


def merge_packs(pack_dir: Path, stems: list[Path]) -> Path | None:
    """Copy the entries of the packs ``stems`` (ones written by ``write_pack``: whole objects, no
    deltas) into one new pack, then remove them; the new pack (None: none of them was left).
    A pack gone already (taken by a gc) is skipped; one opened is read to the end even if
    removed meanwhile."""
    fds, plan, seen = [], [], set()
    try:
        for stem in stems:
            try:
                idx_fd = os.open(stem.with_suffix(".idx"), os.O_RDONLY)
            except FileNotFoundError:
                continue
            with os.fdopen(idx_fd, "rb") as f:
                try:
                    pack_fd = os.open(stem.with_suffix(".pack"), os.O_RDONLY)
                except FileNotFoundError:
                    continue
                fds.append(pack_fd)
                index = read_index(f.read())
            end = os.fstat(pack_fd).st_size - 20
            for i, (off, oid, _) in enumerate(index):
                if oid not in seen:
                    seen.add(oid)
                    plan.append((pack_fd, off, (index[i + 1][0] if i + 1 < len(index) else end) - off, oid))
        if not plan:
            return None

        def pieces():
            for fd, off, length, oid in plan:
                yield oid, [os.pread(fd, min(_COPY, length - at), off + at) for at in range(0, length, _COPY)]
        stem = write_pack(pack_dir, pieces(), len(plan))
    finally:
        for fd in fds:
            os.close(fd)
    for old in stems:
        if old != stem:
            for suffix in (".pack", ".idx"):  # git's order: an index left alone is garbage gc removes
                old.with_suffix(suffix).unlink(missing_ok=True)
    return stem


@contextmanager
def packing(repo: pygit2.Repository, writer: PackWriter | None = None):
    """Within, every ``TreeWriter`` of ``repo`` in this thread queues into one writer (``writer``, or
    a new ``PackWriter``), which the caller flushes before anything outside reads the objects
    (before a ref moves). Nested: the outer writer goes on."""
    outer = getattr(_scope, "writer", None)
    if outer is not None and outer.repo.path == repo.path:
        yield outer
        return
    _scope.writer = writer if writer is not None else PackWriter(repo)
    try:
        yield _scope.writer
    finally:
        _scope.writer = outer


@contextmanager
def packed(repo: pygit2.Repository):
    """``packing`` whose writer is flushed when the block ends without an error: what the block
    wrote (trees, blobs, commits) is one pack, durable before the caller moves a ref after it.
    The block must not read back what it wrote (a queued object is not in the odb yet)."""
    with packing(repo) as pack:
        yield pack
        pack.flush()


def current(repo: pygit2.Repository) -> PackWriter | None:
    """The writer ``packing`` set for ``repo`` in this thread, if any."""
    writer = getattr(_scope, "writer", None)
    return writer if writer is not None and writer.repo.path == repo.path else None
