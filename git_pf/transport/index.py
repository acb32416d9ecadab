"""The ``refs/pf/objects`` layout: side-store objects as git blobs, one ref (docs/transport.md).

The ref names an *index commit* whose tree is

    version             "https://git-pf.dev/spec/objects/v1\\n"
    index/<2 hex>       lines "<sha256> <frame bytes> <blob id>[,<blob id>...]\\n", sorted, unique

listing every object the remote holds. Its parents are the previous index
commit (absent for the first) and one *data commit* whose tree
``<2 hex>/<62 hex>[.<part>]`` holds the zstd frames added by that push as
blobs (a frame over 64 MiB is cut into parts). The index commit itself holds
no data, so a depth-1 fetch of the ref brings the index only. Pure layout:
reads and writes git objects, never refs, never the network.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import pygit2

from ..core.errors import DataError
from ..image.tree import MODE_FILE, MODE_TREE, TreeWriter, read_blob, read_tree
from ..store.packfile import add_commit, packed

VERSION = b"https://git-pf.dev/spec/objects/v1\n"
MAX_BLOB = 64 * 1024 * 1024
_SIG = pygit2.Signature("git-pf", "git-pf@localhost", 0, 0)


@dataclass(frozen=True)
class Entry:
    size: int  # bytes of the stored zstd frame (sum of its parts)
    blobs: tuple[str, ...]  # git blob ids of the frame's parts, in order


Index = dict[str, Entry]


def encode_bucket(entries: dict[str, Entry]) -> bytes:
    return "".join(f"{oid} {e.size} {','.join(e.blobs)}\n" for oid, e in sorted(entries.items())).encode("ascii")


def decode_bucket(data: bytes, where: str) -> dict[str, Entry]:
    out: dict[str, Entry] = {}
    try:
        for line in data.decode("ascii").splitlines():
            oid, size, blobs = line.split(" ")
            if len(oid) != 64 or not blobs:
                raise ValueError(line)
            out[oid] = Entry(int(size), tuple(blobs.split(",")))
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"objects index {where} is malformed") from None
    return out


def _sig() -> pygit2.Signature:
    return pygit2.Signature("git-pf", "git-pf@localhost", int(time.time()), 0)


def _tree_of(git: pygit2.Repository, commit: str) -> dict[bytes, tuple[int, bytes]]:
    try:
        tree = git[commit].peel(pygit2.Tree).id.raw
    except (KeyError, ValueError):
        raise DataError(f"objects index commit {commit[:12]} is not in the local repository") from None
    return {name: (mode, oid) for name, mode, oid in read_tree(git, tree)}


def read_index(git: pygit2.Repository, commit: str | None) -> Index:
    """Every entry of the index commit ``commit`` (empty for None)."""
    if commit is None:
        return {}
    top = _tree_of(git, commit)
    if b"version" not in top or read_blob(git, top[b"version"][1]) != VERSION:
        raise DataError(f"refs/pf/objects {commit[:12]} is not a git-pf objects index v1")
    out: Index = {}
    if b"index" in top:
        for name, mode, oid in read_tree(git, top[b"index"][1]):
            out.update(decode_bucket(read_blob(git, oid), f"{commit[:12]}:index/{name.decode()}"))
    return out


def write_data_commit(git: pygit2.Repository, blobs: dict[str, Entry]) -> str:
    """A parentless commit whose tree holds the blobs of ``blobs`` (already in the odb)."""
    fan: dict[bytes, list] = {}
    for oid, entry in blobs.items():
        for n, blob in enumerate(entry.blobs):
            name = oid[2:] if len(entry.blobs) == 1 else f"{oid[2:]}.{n}"
            fan.setdefault(oid[:2].encode(), []).append((name.encode(), MODE_FILE, bytes.fromhex(blob)))
    msg = f"pf objects: {len(blobs)} objects, {sum(e.size for e in blobs.values())} bytes\n"
    with packed(git) as pack:  # one pack, no loose object (docs/format.md)
        writer = TreeWriter(git)
        tree = writer.write([(d, MODE_TREE, writer.write(entries)) for d, entries in fan.items()])
        return add_commit(pack, _SIG, _SIG, msg, tree.hex(), [])


def write_index_commit(git: pygit2.Repository, base: str | None, base_index: Index, added: Index,
                       data_commit: str) -> str:
    """The index commit for ``base_index`` plus ``added``, parents ``base`` (if any) and ``data_commit``."""
    with packed(git) as pack:  # one pack, no loose object (docs/format.md)
        return _write_index_commit(git, TreeWriter(git), pack, base, base_index, added, data_commit)


def _write_index_commit(git, writer: TreeWriter, pack, base: str | None, base_index: Index, added: Index,
                        data_commit: str) -> str:
    buckets: dict[bytes, tuple[int, bytes]] = {}
    if base is not None:
        top = _tree_of(git, base)
        if b"index" in top:
            buckets = {name: (mode, oid) for name, mode, oid in read_tree(git, top[b"index"][1])}
    touched = sorted({oid[:2] for oid in added if oid not in base_index})
    for prefix in touched:
        merged = {o: e for o, e in base_index.items() if o[:2] == prefix}
        merged.update({o: e for o, e in added.items() if o[:2] == prefix and o not in merged})
        buckets[prefix.encode()] = (MODE_FILE, writer.write_blob(encode_bucket(merged)))
    index_tree = writer.write([(n, m, o) for n, (m, o) in buckets.items()])
    tree = writer.write([(b"version", MODE_FILE, writer.write_blob(VERSION)), (b"index", MODE_TREE, index_tree)])
    parents = ([base] if base else []) + [data_commit]
    msg = f"pf objects index: +{sum(1 for o in added if o not in base_index)} objects\n"
    return add_commit(pack, _sig(), _sig(), msg, tree.hex(), parents)


_TIP_TRAILER = "Pf-Remote-Tip: "


def wrap(git: pygit2.Repository, tip: str) -> str:
    """A parentless commit with the tree of the remote index commit ``tip`` and ``tip`` in its
    message: what ``refs/pf/remotes/<r>/objects`` names, so the ref reaches the index but none
    of the remote's history (whose commits this repository does not hold). Time 0: the same
    tip gives the same commit."""
    tree = git[tip].peel(pygit2.Tree).id
    msg = f"pf objects index of a remote\n\n{_TIP_TRAILER}{tip}\n"
    with packed(git) as pack:  # no loose object (docs/format.md)
        return add_commit(pack, _SIG, _SIG, msg, tree, [])


def unwrap(git: pygit2.Repository, commit: str) -> str:
    """The remote tip a ``wrap`` commit stands for (``commit`` itself when it is no wrapper)."""
    try:
        msg = git[commit].message
    except (KeyError, ValueError):
        return commit
    for line in msg.splitlines():
        if line.startswith(_TIP_TRAILER):
            return line[len(_TIP_TRAILER):].strip()
    return commit
