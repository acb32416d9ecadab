"""Writing git tree objects straight into the object database.

Trees are encoded by hand (mode, name bytes, raw oid; git's sort order) so a
snapshot can build thousands of them without a TreeBuilder round trip per
entry, and so names are raw bytes end to end. Blobs are read bounded: a blob's
size comes from its object header before any of it is inflated; ``read_blob``
reads whole only a blob within a limit (``pf.maxBlobSize`` by default), and
``iter_blob`` streams a larger one through ``git cat-file`` in fixed chunks
(docs/security.md, "Bounded reads"). Knows nothing of images.
"""
from __future__ import annotations

import hashlib
import subprocess
from typing import Callable, Iterable, Iterator

import pygit2

from ..core import limits
from ..core.errors import DataError, MissingObject, WriteFailed
from ..store import pointer as pointer_fmt
from ..store.packfile import BLOB, TREE, PackWriter, current

MODE_FILE = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_TREE = 0o040000

Entry = tuple[bytes, int, bytes]  # (name, mode, 20-byte oid)


def _sort_key(entry: Entry) -> bytes:
    name, mode, _ = entry
    return name + b"/" if mode == MODE_TREE else name


def encode_tree(entries: Iterable[Entry]) -> bytes:
    return b"".join(b"%o %s\x00%s" % (mode, name, oid) for name, mode, oid in sorted(entries, key=_sort_key))


def tree_oid(data: bytes) -> bytes:
    return hashlib.sha1(b"tree %d\x00" % len(data) + data).digest()


def _odb_write(odb, kind, data: bytes) -> pygit2.Oid:
    try:
        return odb.write(kind, data)
    except (OSError, pygit2.GitError) as e:
        raise WriteFailed(f"cannot write to the git object database: {e}") from None


class TreeWriter:
    """Writes trees and blobs into a repository, skipping ones the odb already holds.

    With ``packed=True`` new objects are queued and written as one pack by
    ``flush()`` (which the owner must call before anything reads them back).
    Inside ``packfile.packing`` every write (packed or not) queues into that
    scope's writer, which its owner flushes (``flush()`` here leaves it be)."""

    def __init__(self, repo: pygit2.Repository, packed: bool = False):
        self.repo = repo
        self.odb = repo.odb
        self.own = PackWriter(repo) if packed else None

    @property
    def pack(self) -> PackWriter | None:
        return current(self.repo) or self.own

    def write(self, entries: Iterable[Entry]) -> bytes:
        return self.write_encoded(encode_tree(entries))

    def write_encoded(self, data: bytes) -> bytes:
        """Write a tree given as its raw bytes (entries already in git's order)."""
        pack = self.pack
        if pack is not None:
            return pack.add(TREE, data)
        raw = tree_oid(data)
        if pygit2.Oid(raw=raw) not in self.odb:
            _odb_write(self.odb, pygit2.enums.ObjectType.TREE, data)
        return raw

    def write_blob(self, data: bytes) -> bytes:
        pack = self.pack
        if pack is not None:
            return pack.add(BLOB, data)
        return _odb_write(self.odb, pygit2.enums.ObjectType.BLOB, data).raw

    def flush(self) -> None:
        if self.own is not None and current(self.repo) is None:
            self.own.flush()


def decode_tree(data: bytes) -> list[Entry]:
    """Parse a raw tree object into ``(name, mode, raw oid)`` entries, in stored order.
    Bytes that are no tree (a name holding NUL shifts every field after it) are a ValueError."""
    out: list[Entry] = []
    i, n = 0, len(data)
    while i < n:
        sp = data.find(b" ", i)
        nul = data.find(b"\x00", sp)
        mode, oid = data[i:sp], data[nul + 1 : nul + 21]
        if sp < 0 or nul < 0 or not mode.isdigit() or len(oid) != 20:
            raise ValueError(f"malformed tree entry at byte {i}")
        out.append((data[sp + 1 : nul], int(mode, 8), oid))
        i = nul + 21
    return out


def read_tree(repo: pygit2.Repository, raw_oid: bytes) -> list[Entry]:
    """The entries of tree ``raw_oid``; an object that is not a well-formed tree is a DataError."""
    kind, data = repo.odb.read(pygit2.Oid(raw=raw_oid))
    try:
        if kind != pygit2.enums.ObjectType.TREE:
            raise ValueError("not a tree object")
        return decode_tree(data)
    except ValueError as e:
        raise DataError(f"tree {raw_oid.hex()}: {e}") from None


STREAM_ABOVE = 16 << 20  # ``iter_blob`` reads a blob up to this size whole, streams a larger one
STREAM_CHUNK = 1 << 20
_NO_DELTA = "0" * 40


def blob_size(repo: pygit2.Repository, raw_oid: bytes) -> int:
    """The size of object ``raw_oid`` from its header alone; a missing object is a MissingObject."""
    try:
        return repo.odb.read_header(pygit2.Oid(raw=raw_oid))[1]
    except (KeyError, pygit2.GitError):
        raise MissingObject(f"blob {raw_oid.hex()} is missing") from None


def over_limit(size: int, limit: int | None = None, key: str = "pf.maxBlobSize") -> str | None:
    """The reason a blob of ``size`` bytes is not read whole (None when it may be): over
    ``limit`` (named ``key``), by default ``pf.maxBlobSize``."""
    limit = limits.active().max_blob if limit is None else limit
    return f"{size} bytes, over {key} ({limit})" if size > limit else None


def read_blob(repo: pygit2.Repository, raw_oid: bytes, limit: int | None = None,
              key: str = "pf.maxBlobSize") -> bytes:
    """The bytes of blob ``raw_oid``, read only when its size (from its header) is within
    ``limit`` (named ``key`` in the error; default ``pf.maxBlobSize``): a larger one is a
    DataError naming the blob, and nothing of it is inflated."""
    problem = over_limit(blob_size(repo, raw_oid), limit, key)
    if problem:
        raise DataError(f"blob {raw_oid.hex()}: {problem}")
    return repo.odb.read(pygit2.Oid(raw=raw_oid))[1]


def read_pointer(repo: pygit2.Repository, raw_oid: bytes) -> pointer_fmt.Pointer:
    """The side-store pointer held in blob ``raw_oid``: a ValueError when it is none, also
    when the blob is larger than any pointer (then it is not read)."""
    size = blob_size(repo, raw_oid)
    if size >= pointer_fmt.MAX_POINTER_SIZE:
        raise ValueError(f"{size} bytes, larger than any pointer")
    return pointer_fmt.decode(repo.odb.read(pygit2.Oid(raw=raw_oid))[1])


def iter_blob(repo: pygit2.Repository, raw_oid: bytes, size: int | None = None) -> Iterator[bytes]:
    """The bytes of blob ``raw_oid`` (``size`` from its header when not given), in pieces:
    whole up to ``STREAM_ABOVE``, else streamed by ``git cat-file blob`` (which inflates a
    loose or whole packed object a buffer at a time) in ``STREAM_CHUNK`` pieces. A large
    blob stored as a delta, which git would rebuild whole in memory, is read only within
    ``pf.maxBlobSize``. A stream that ends short or long is a DataError."""
    size = blob_size(repo, raw_oid) if size is None else size
    if size <= STREAM_ABOVE:
        yield repo.odb.read(pygit2.Oid(raw=raw_oid))[1]
        return
    git = ["git", "--git-dir", repo.path, "-c", f"core.bigFileThreshold={STREAM_ABOVE}"]  # git streams past it
    hexid = raw_oid.hex()
    base = subprocess.run([*git, "cat-file", "--batch-check=%(deltabase)"], input=hexid.encode() + b"\n",
                          capture_output=True, check=False).stdout.strip().decode(errors="replace")
    if base != _NO_DELTA and (problem := over_limit(size)):
        raise DataError(f"blob {hexid}: stored as a delta of {problem}")
    proc = subprocess.Popen([*git, "cat-file", "blob", hexid], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    got = 0
    try:
        while chunk := proc.stdout.read(STREAM_CHUNK):
            got += len(chunk)
            if got > size:
                break
            yield chunk
    finally:  # also when the reader stops early: git is not left blocked on the pipe
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.wait()
    if got != size:
        raise DataError(f"blob {hexid}: git gave {got} bytes{'+' if got > size else ''}, its header says {size}")


Change = tuple[int, bytes] | None  # (mode, raw oid) to put at a path, or None to remove it


def edit(writer: "TreeWriter", repo: pygit2.Repository, base: bytes | None, changes: dict[bytes, Change]) -> bytes:
    """A new tree: ``base`` (raw oid, or None for empty) with ``changes`` applied.

    Keys are ``/``-separated paths; intermediate trees are created as needed and
    trees left empty are dropped. Untouched subtrees keep their ids."""
    entries = {name: (mode, oid) for name, mode, oid in (read_tree(repo, base) if base else [])}
    grouped: dict[bytes, dict[bytes, Change]] = {}
    for path, change in changes.items():
        head, sep, rest = path.partition(b"/")
        if sep:
            grouped.setdefault(head, {})[rest] = change
        elif change is None:
            entries.pop(head, None)
        else:
            entries[head] = change
    for head, sub in grouped.items():
        current = entries.get(head)
        sub_base = current[1] if current and current[0] == MODE_TREE else None
        new = edit(writer, repo, sub_base, sub)
        if new == tree_oid(b""):
            entries.pop(head, None)
        else:
            entries[head] = (MODE_TREE, new)
    return writer.write((name, mode, oid) for name, (mode, oid) in entries.items())


def lookup(repo: pygit2.Repository, tree: bytes, path: bytes) -> tuple[int, bytes] | None:
    """The ``(mode, raw oid)`` at ``path`` inside ``tree``, or None."""
    mode, oid = MODE_TREE, tree
    for part in path.split(b"/"):
        if mode != MODE_TREE:
            return None
        found = next(((m, o) for n, m, o in read_tree(repo, oid) if n == part), None)
        if found is None:
            return None
        mode, oid = found
    return mode, oid


def diff_trees(repo: pygit2.Repository, a: bytes | None, b: bytes | None, prefix: bytes = b"",
               skip: Callable[[bytes], bool] | None = None):
    """Yield ``(path, old, new)`` for every non-tree path that differs, where old/new are
    ``(mode, raw oid)`` or None; equal subtrees are skipped by id, and paths (files or
    trees) for which ``skip`` is true are not yielded nor descended into."""
    if a == b:
        return
    ea = {n: (m, o) for n, m, o in (read_tree(repo, a) if a else [])}
    eb = {n: (m, o) for n, m, o in (read_tree(repo, b) if b else [])}
    for name in sorted(ea.keys() | eb.keys()):
        old, new = ea.get(name), eb.get(name)
        if old == new:
            continue
        path = prefix + name
        if skip is not None and skip(path):
            continue
        old_tree = old[1] if old and old[0] == MODE_TREE else None
        new_tree = new[1] if new and new[0] == MODE_TREE else None
        if old_tree or new_tree:
            yield from diff_trees(repo, old_tree, new_tree, path + b"/", skip)
        if (old and not old_tree) or (new and not new_tree):
            yield path, (old if old and not old_tree else None), (new if new and not new_tree else None)
