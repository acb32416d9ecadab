"""LangGraph threads kept as git-pf branches: ref names, a thread's heads, and checkpoint images.

A thread's namespace is a branch, ``lg/<thread>`` (``lg/<thread>+<namespace>`` for a
subgraph's), at the image of its latest checkpoint; the tip of a fork that is not the latest
keeps a branch of its own, ``<branch>@<checkpoint id>``. Ids are %-encoded into names (every
byte but ``A-Za-z0-9_-``), so ``+`` and ``@`` never occur inside one. An image's ``langgraph/``
tree holds one checkpoint (``checkpoint.json`` names the ids, the parent, the type of each
serialised value, the channel versions and the pending writes; each value is a blob of its
own); its commit parent is the image of the parent checkpoint. Writes added to a checkpoint
later make a child image of the same checkpoint (``Pf-LangGraph-Rev``), so history only grows.
Image data is untrusted: a malformed ``checkpoint.json`` is a ``DataError``, and each blob under
``langgraph/`` is size-checked (its object header, against ``pf.maxJsonLine``) before it is
read. Knows nothing of
LangGraph's types (it keeps ``(type, bytes)`` pairs); writes git objects and moves refs under
``refs/pf/heads/lg/`` only.
"""
from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import unquote_to_bytes

import pygit2

from ..core import canonjson, jsonl, limits
from ..image import manifest as img, refs, signing
from ..core.errors import DataError
from ..image.tree import MODE_FILE, MODE_TREE, TreeWriter, blob_size, lookup, over_limit, read_blob, read_tree

ROOT = b"langgraph"
INDEX = b"checkpoint.json"
SCHEMA = 1
PREFIX = "lg/"
REMOTES = "refs/pf/remotes/"
TRAILER_ID, TRAILER_REV = "Pf-LangGraph-Checkpoint", "Pf-LangGraph-Rev"
_SAFE = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_ENCODED = re.compile(r"^(?:[A-Za-z0-9_-]|%[0-9A-F]{2})*$")

Typed = tuple[str, bytes]  # (serializer type, bytes), as LangGraph's dumps_typed gives it
Write = tuple[str, str, int, str, Typed]  # task id, channel, index, task path, value


def encode(text: str) -> str:
    """``text`` as one ref-name component; the empty string is ``%``."""
    return "".join(chr(b) if b in _SAFE else f"%{b:02X}" for b in text.encode("utf-8", "surrogatepass")) or "%"


def decode(name: str) -> str | None:
    """The text ``encode`` made ``name`` from; None when it is not such a name."""
    if name == "%":
        return ""
    if not name or not _ENCODED.match(name):
        return None
    try:
        text = unquote_to_bytes(name).decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:
        return None
    return text if encode(text) == name else None


@dataclass(frozen=True, order=True)
class Key:
    """One namespace of one thread: a branch."""

    thread: str
    ns: str = ""

    @property
    def branch(self) -> str:
        return PREFIX + encode(self.thread) + (f"+{encode(self.ns)}" if self.ns else "")

    def leaf(self, checkpoint_id: str) -> str:
        return f"{self.branch}@{encode(checkpoint_id)}"


def parse_branch(name: str) -> tuple[Key, str | None] | None:
    """``(key, leaf checkpoint id or None)`` of a branch name under ``lg/``; None for others."""
    if not name.startswith(PREFIX):
        return None
    body, _, leaf = name[len(PREFIX):].partition("@")
    thread, plus, ns = body.partition("+")
    parts = [decode(thread), decode(ns) if plus else "", decode(leaf) if leaf else None]
    if parts[0] is None or parts[1] is None or (leaf and parts[2] is None) or (plus and parts[1] == ""):
        return None
    return Key(parts[0], parts[1]), parts[2]


@dataclass
class Record:
    """One checkpoint as an image holds it: its values as ``(type, blob id)``."""

    thread_id: str
    ns: str
    checkpoint_id: str
    parent_id: str | None
    checkpoint: tuple[str, bytes]
    metadata: tuple[str, bytes]
    channels: dict[str, tuple[object, tuple[str, bytes]]] = field(default_factory=dict)  # name -> (version, value)
    writes: list[tuple[str, str, int, str, tuple[str, bytes]]] = field(default_factory=list)


def _blob_tree(writer: TreeWriter, values: list[tuple[bytes, bytes]]) -> bytes:
    return writer.write([(name, MODE_FILE, oid) for name, oid in values])


def write_tree(writer: TreeWriter, rec: Record) -> bytes:
    """The ``langgraph/`` tree of ``rec``, whose values are blob ids (raw)."""
    index = {"schema": SCHEMA, "thread_id": rec.thread_id, "checkpoint_ns": rec.ns,
             "checkpoint_id": rec.checkpoint_id, "parent_checkpoint_id": rec.parent_id,
             "checkpoint": rec.checkpoint[0], "metadata": rec.metadata[0],
             "channels": {ch: [version, value[0]] for ch, (version, value) in rec.channels.items()},
             "writes": [[task, ch, idx, path, value[0]] for task, ch, idx, path, value in rec.writes]}
    entries = [(INDEX, MODE_FILE, writer.write_blob(canonjson.encode(index))),
               (b"checkpoint", MODE_FILE, rec.checkpoint[1]), (b"metadata", MODE_FILE, rec.metadata[1])]
    if rec.channels:
        values = [(encode(ch).encode(), value[1]) for ch, (_, value) in rec.channels.items()]
        entries.append((b"values", MODE_TREE, _blob_tree(writer, values)))
    if rec.writes:
        entries.append((b"writes", MODE_TREE, _blob_tree(writer, [(str(n).encode(), w[4][1]) for n, w in
                                                                    enumerate(rec.writes)])))
    return writer.write(entries)


def _str(value, what: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"langgraph/checkpoint.json: {what} must be a string")
    return value


def _version(value, what: str):
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise DataError(f"langgraph/checkpoint.json: {what} must be a string or a number")
    return value


def read_record(git: pygit2.Repository, tree_hex: str) -> Record:
    """The checkpoint an image tree holds (its values as blob ids); DataError when malformed."""
    found = lookup(git, bytes.fromhex(tree_hex), ROOT)
    if found is None or found[0] != MODE_TREE:
        raise DataError("the image holds no langgraph/ tree")
    files = {name: (mode, oid) for name, mode, oid in read_tree(git, found[1])}

    def blob(name: bytes, tree: dict | None = None) -> bytes:
        entry = (files if tree is None else tree).get(name)
        if entry is None or entry[0] != MODE_FILE:
            raise DataError(f"langgraph/: {name.decode('utf-8', 'replace')} is missing or not a file")
        return entry[1]

    def subtree(name: bytes) -> dict:
        entry = files.get(name)
        if entry is None:
            return {}
        if entry[0] != MODE_TREE:
            raise DataError(f"langgraph/{name.decode()} is not a tree")
        return {n: (m, o) for n, m, o in read_tree(git, entry[1])}

    doc = jsonl.loads(read_bounded(git, blob(INDEX), "langgraph/checkpoint.json"), "langgraph/checkpoint.json")
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise DataError("langgraph/checkpoint.json: not a schema 1 object")
    parent = doc.get("parent_checkpoint_id")
    rec = Record(_str(doc.get("thread_id"), "thread_id"), _str(doc.get("checkpoint_ns"), "checkpoint_ns"),
                 _str(doc.get("checkpoint_id"), "checkpoint_id"),
                 None if parent is None else _str(parent, "parent_checkpoint_id"),
                 (_str(doc.get("checkpoint"), "checkpoint"), blob(b"checkpoint")),
                 (_str(doc.get("metadata"), "metadata"), blob(b"metadata")))
    channels, values = doc.get("channels"), subtree(b"values")
    if not isinstance(channels, dict):
        raise DataError("langgraph/checkpoint.json: channels must be an object")
    for ch, spec in channels.items():
        if not isinstance(spec, list) or len(spec) != 2:
            raise DataError("langgraph/checkpoint.json: a channel must be [version, type]")
        rec.channels[ch] = (_version(spec[0], "a version"), (_str(spec[1], "a type"), blob(encode(ch).encode(), values)))
    writes, stored = doc.get("writes"), subtree(b"writes")
    if not isinstance(writes, list):
        raise DataError("langgraph/checkpoint.json: writes must be a list")
    for n, w in enumerate(writes):
        if not isinstance(w, list) or len(w) != 5 or not isinstance(w[2], int) or isinstance(w[2], bool):
            raise DataError("langgraph/checkpoint.json: a write must be [task, channel, index, path, type]")
        rec.writes.append((_str(w[0], "a task id"), _str(w[1], "a channel"), w[2], _str(w[3], "a task path"),
                           (_str(w[4], "a type"), blob(str(n).encode(), stored))))
    return rec


def read_bounded(git: pygit2.Repository, raw_oid: bytes, what: str) -> bytes:
    """The blob ``raw_oid`` (``what`` names it), its size checked against ``pf.maxJsonLine``
    from its object header first: an oversized blob is a DataError and is never read."""
    limit = limits.active().max_json_line
    problem = over_limit(blob_size(git, raw_oid), limit, "pf.maxJsonLine")
    if problem:
        raise DataError(f"{what}: {problem}")
    return read_blob(git, raw_oid, limit, "pf.maxJsonLine")


def load(git: pygit2.Repository, typed: tuple[str, bytes], what: str) -> Typed:
    """A stored value's ``(type, bytes)`` (``what``: its path under ``langgraph/``), size-checked."""
    return typed[0], read_bounded(git, typed[1], what)


@dataclass(slots=True)
class Image:
    """One image of a checkpoint; a saver holds one per image of each thread it read (slotted: a
    long session's index costs what its fields do)."""

    oid: str
    checkpoint_id: str
    rev: int


HOT = 64  # a thread's index keeps its newest HOT to 2 * HOT checkpoints; older ones are read from git


@dataclass
class Thread:
    """What a saver knows of one key: its heads (ref name -> image) and the newest image of each
    recent checkpoint. ``local``: the heads are local branches (else a remote's tracking refs).

    Bounded however long the thread: ``images`` holds the newest image of every checkpoint whose
    id is ``floor`` or above (of every checkpoint while ``floor`` is None; LangGraph's ids grow
    with time), at most ``2 * hot``, the oldest let go beyond that; ``find`` reads an older one
    from git, and the last ``hot`` found are kept in ``cold``. ``by_oid`` holds the images of
    ``images`` and ``cold`` and the heads'. ``hot=None``: nothing is let go (``merged``, ``rewrite``)."""

    key: Key
    heads: dict[str, str] = field(default_factory=dict)
    local: bool = True
    images: dict[str, Image] = field(default_factory=dict)  # checkpoint id -> newest image
    by_oid: dict[str, Image] = field(default_factory=dict)
    hot: int | None = HOT
    floor: str | None = None
    cold: OrderedDict[str, Image] = field(default_factory=OrderedDict)  # checkpoint id below floor -> newest image

    def add(self, image: Image, written: bool = False) -> None:
        """Index ``image``; ``written``: just written, so the newest image of its checkpoint."""
        cid = image.checkpoint_id
        if self.floor is not None and cid < self.floor and cid not in self.images:
            if written:  # a write to a checkpoint older than the index: kept with the ones found
                self.by_oid[image.oid] = image
                self.remember(image)
            return  # met while loading: ``find`` reads it from git when asked
        self.by_oid[image.oid] = image
        old = self.images.get(cid)
        if old is None or old.rev < image.rev:
            self.images[cid] = image
        if self.hot is not None and len(self.images) > 2 * self.hot:
            self._trim()

    def remember(self, image: Image) -> None:
        """Keep ``image`` (of a checkpoint below ``floor``, found in git) among the last ``hot`` found."""
        self.cold[image.checkpoint_id] = image
        self.cold.move_to_end(image.checkpoint_id)
        self.by_oid[image.oid] = image
        while len(self.cold) > (self.hot or 0):
            gone = self.cold.popitem(last=False)[1]
            if gone.oid not in self.heads.values():
                self.by_oid.pop(gone.oid, None)

    def _trim(self) -> None:
        """Let go of the oldest checkpoints beyond ``hot``; ``floor`` rises to the oldest kept."""
        kept = sorted(self.images)[-self.hot:]
        self.floor = kept[0] if self.floor is None else max(self.floor, kept[0])
        self.images = {cid: self.images[cid] for cid in kept}
        tips = set(self.heads.values())
        self.by_oid = {oid: i for oid, i in self.by_oid.items()
                       if oid in tips or i.checkpoint_id in self.images or self.cold.get(i.checkpoint_id) is i}

    def known(self, cid: str) -> Image | None | bool:
        """The newest image of ``cid`` when indexed; None when it is not a checkpoint of the thread;
        False when it is older than the index (``find`` reads it from git)."""
        found = self.images.get(cid) or self.cold.get(cid)
        if found is not None or self.floor is None or cid >= self.floor:
            return found
        return False

    def latest(self) -> str | None:
        return max(self.images, default=None)


def image_of(commit: pygit2.Commit) -> Image | None:
    trailers = dict(img.parse_trailers(commit.message))
    cid, rev = decode(trailers.get(TRAILER_ID, "")), trailers.get(TRAILER_REV, "")
    return Image(str(commit.id), cid, int(rev)) if cid is not None and rev.isdigit() else None


def scan(git: pygit2.Repository, near: Key | None = None) -> dict[Key, dict[str, dict[str, str]]]:
    """Every key with refs (only those of ``near``'s thread when given):
    ``{key: {"local": {branch: oid}, "remote": {full ref: oid}}}``."""
    start = PREFIX + encode(near.thread) if near is not None else PREFIX
    out: dict[Key, dict[str, dict[str, str]]] = {}
    for full in git.references:
        if full.startswith(refs.HEADS + start):
            where, name = "local", full[len(refs.HEADS):]
        elif full.startswith(REMOTES) and f"/heads/{start}" in full:
            where, name = "remote", full.split("/heads/", 1)[1]
        else:
            continue
        parsed = parse_branch(name)
        if parsed is None or (near is not None and parsed[0].thread != near.thread):
            continue
        ref = refs.lookup(git, full)
        if ref is not None and ref.type == pygit2.enums.ReferenceType.DIRECT:
            out.setdefault(parsed[0], {"local": {}, "remote": {}})[where][name if where == "local" else full] = \
                str(ref.target)
    return out


def delete_refs(git: pygit2.Repository, names) -> None:
    for full in names:
        ref = refs.lookup(git, full)
        if ref is not None:
            ref.delete()


def _images(git: pygit2.Repository, tips) -> Iterator[Image]:
    """The image of every commit reachable from ``tips`` (commit ids), in no set order."""
    walker = git.walk(None, pygit2.enums.SortMode.NONE)
    for oid in set(tips):
        walker.push(pygit2.Oid(hex=oid))
    for commit in walker:
        image = image_of(commit)
        if image is not None:
            yield image


def load_thread(git: pygit2.Repository, key: Key, found: dict[str, dict[str, str]] | None,
                hot: int | None = HOT) -> Thread:
    """The thread ``key`` from its refs (``scan``'s entry): local heads, else a remote's; every
    image reachable from them is read, the newest ``hot`` to ``2 * hot`` checkpoints' indexed
    (every one with ``hot=None``)."""
    found = found or {"local": {}, "remote": {}}
    local = bool(found["local"])
    thread = Thread(key, dict(found["local"]) if local else _one_remote(found["remote"]), local, hot=hot)
    for oid in set(thread.heads.values()):  # the heads' images stay indexed, however old
        commit = git.get(oid)
        image = image_of(commit) if isinstance(commit, pygit2.Commit) else None
        if image is not None:
            thread.by_oid[oid] = image
    for image in _images(git, thread.heads.values()):
        thread.add(image)
    return thread


def find(git: pygit2.Repository, thread: Thread, cid: str) -> Image | None:
    """The newest image of checkpoint ``cid`` in the thread (read from git when older than its
    index, then remembered); None when the thread has no such checkpoint."""
    found = thread.known(cid)
    if found is not False:
        return found
    for image in _images(git, thread.heads.values()):
        if image.checkpoint_id == cid and (found is False or found.rev < image.rev):
            found = image
    if found is False:
        return None
    thread.remember(found)
    return found


def older(git: pygit2.Repository, thread: Thread, below: str) -> dict[str, Image]:
    """Checkpoint id -> newest image of each checkpoint of the thread whose id is below ``below``,
    read from git (kept by the caller only, not by the thread)."""
    out: dict[str, Image] = {}
    for image in _images(git, thread.heads.values()):
        old = out.get(image.checkpoint_id)
        if image.checkpoint_id < below and (old is None or old.rev < image.rev):
            out[image.checkpoint_id] = image
    return out


def _one_remote(remote: dict[str, str]) -> dict[str, str]:
    """The tracking refs of one remote (the first by name), keyed by branch name."""
    if not remote:
        return {}
    first = sorted(remote)[0].split("/heads/", 1)[0]
    return {full.split("/heads/", 1)[1]: oid for full, oid in remote.items() if full.startswith(first + "/heads/")}


def desired_heads(thread: Thread, new: Image | None, replaced: str | None) -> dict[str, str]:
    """The branch names a thread's heads go to once ``new`` is written on top of ``replaced``: the
    latest checkpoint's head on the branch, each other head on ``<branch>@<checkpoint id>``."""
    heads = [thread.by_oid[o] for o in dict.fromkeys(thread.heads.values()) if o != replaced and o in thread.by_oid]
    if new is not None:
        heads.append(new)
    heads.sort(key=lambda i: (i.checkpoint_id, i.rev), reverse=True)
    out: dict[str, str] = {}
    for n, image in enumerate(heads):
        name = thread.key.branch if n == 0 else thread.key.leaf(image.checkpoint_id)
        out[name if name not in out else f"{name}.{image.rev}"] = image.oid
    return out


def move_heads(git: pygit2.Repository, thread: Thread, wanted: dict[str, str], log: str) -> None:
    """Point the thread's local branches at ``wanted``: new leaves first, the branch (compare and
    swap) next, stale leaves last, so an interruption leaves every image reachable."""
    old = thread.heads if thread.local else {}
    branch = thread.key.branch
    for name, oid in wanted.items():
        if name != branch and old.get(name) != oid:
            git.references.create(refs.HEADS + name, pygit2.Oid(hex=oid), force=True)
    if branch in wanted and old.get(branch) != wanted[branch]:
        refs.update_branch(git, branch, wanted[branch], old.get(branch), log)
    for name in old:
        if name not in wanted:
            ref = refs.lookup(git, refs.HEADS + name)
            if ref is not None:
                ref.delete()
    thread.heads, thread.local = dict(wanted), True


def merged(a: Thread, b: Thread) -> Thread:
    """A thread (``a``'s key) holding the heads and images of both (read with ``hot=None``)."""
    out = Thread(a.key, {**{f"a/{n}": o for n, o in a.heads.items()}, **{f"b/{n}": o for n, o in b.heads.items()}},
                 hot=None)
    for image in [*a.by_oid.values(), *b.by_oid.values()]:
        out.add(image)
    return out


def _tips(git: pygit2.Repository, oids) -> tuple[str, ...]:
    """``oids`` in order, once each, without any that another of them descends from."""
    seen = tuple(dict.fromkeys(oids))
    return tuple(t for t in seen if not any(t != u and git.descendant_of(u, t) for u in seen))


def rewrite(git: pygit2.Repository, thread: Thread, gone: set[str]) -> dict[str, str]:
    """Rewrite the thread (read with ``hot=None``) without the images of the checkpoints ``gone``: each image
    kept gets its nearest kept ancestors as parents (the first parent's first; trees and messages
    as they were), so an image reached only through a second parent (writes that came after the
    next checkpoint) is kept too. The heads to move to (``desired_heads``); a head left with
    nothing is dropped."""
    walker = git.walk(None, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    for oid in set(thread.heads.values()):
        walker.push(pygit2.Oid(hex=oid))
    new: dict[str, tuple[str, ...]] = {}  # old commit -> the kept commits that stand for it
    for commit in walker:
        oid, parents = str(commit.id), [str(p) for p in commit.parent_ids]
        above = _tips(git, [t for p in parents for t in new.get(p, ())])
        image = thread.by_oid.get(oid)
        if image is None or image.checkpoint_id in gone:
            new[oid] = above
        elif list(above) == parents:
            new[oid] = (oid,)
        else:
            written = signing.write_commit(git, commit.author, commit.committer, commit.message, commit.tree_id,
                                           list(above))
            thread.add(Image(written, image.checkpoint_id, image.rev))
            new[oid] = (written,)
    tips = _tips(git, [t for o in thread.heads.values() for t in new.get(o, ())])
    kept = Thread(thread.key, {t: t for t in tips}, hot=None)
    for t in tips:
        kept.add(thread.by_oid[t])
    return desired_heads(kept, None, None)
