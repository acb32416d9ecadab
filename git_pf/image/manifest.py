"""The image: one agent snapshot as a git commit whose tree holds every layer.

Knows the tree layout of format v1 (docs/format.md), the ``pf.json``
manifest, and the commit message with its ``Pf-*`` trailers; reads images
back as typed ``ImageInfo`` values, checking the manifest's types (image data
is untrusted: malformed is a ``DataError``). Does not walk sandboxes or touch refs.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import pygit2

from ..core import jsonl, limits
from ..core.errors import DataError, PfError, UsageError
from .tree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, TreeWriter, blob_size, edit, lookup, over_limit

SCHEMA = 1
MANIFEST = b"pf.json"
WORLD_FS = b"world/fs"
WORLD_ATTRS = b"world/fs.attrs.jsonl"
WORLD_ENV = b"world/env.json"
WORLD_PROCS = b"world/procs.json"
TRACE_MESSAGES = b"trace/messages.jsonl"
TRACE_TAPE = b"trace/tape"
EFFECTS_LEDGER = b"effects/ledger.jsonl"

AGENT_KEYS = ("kind", "version", "fingerprint")

_TRAILER = re.compile(r"^(Pf-[A-Za-z-]+): (.*)$")


@dataclass(frozen=True)
class Agent:
    kind: str | None = None
    version: str | None = None
    fingerprint: str | None = None

    @classmethod
    def parse(cls, spec: str | None, fingerprint: str | None = None) -> "Agent":
        """``KIND[/VERSION]``."""
        if not spec:
            return cls(None, None, fingerprint)
        kind, _, version = spec.partition("/")
        if not kind:
            raise UsageError(f"'{spec}' is not KIND[/VERSION]", param="agent")
        return cls(kind, version or None, fingerprint)

    def to_json(self) -> dict:
        return {"kind": self.kind, "version": self.version, "fingerprint": self.fingerprint}

    def label(self) -> str:
        return f"{self.kind}/{self.version}" if self.version else (self.kind or "")


@dataclass(frozen=True)
class ImageInfo:
    """An image as read back: commit metadata plus its manifest."""

    id: str
    tree: str
    parents: tuple[str, ...]
    subject: str
    message: str
    time: int
    offset: int
    author: str
    manifest: dict = field(hash=False, compare=False)
    trailers: tuple[tuple[str, str], ...] = ()

    @property
    def short(self) -> str:
        return self.id[:12]

    def trailer(self, key: str) -> list[str]:
        return [v for k, v in self.trailers if k == key]

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "tree": self.tree,
            "parents": list(self.parents),
            "subject": self.subject,
            "time": self.time,
            "offset": self.offset,
            "author": self.author,
            "trailers": [list(t) for t in self.trailers],
            "manifest": self.manifest,
        }


def make_manifest(agent: Agent, label: str, layers: dict) -> dict:
    return {"schema": SCHEMA, "agent": agent.to_json(), "label": label, "layers": layers}


def format_message(subject: str, trailers: list[tuple[str, str]]) -> str:
    subject = " ".join(subject.split()) or "snapshot"
    body = "\n".join(f"{k}: {v}" for k, v in trailers)
    return f"{subject}\n\n{body}\n" if trailers else f"{subject}\n"


def parse_trailers(message: str) -> tuple[tuple[str, str], ...]:
    last = message.strip().split("\n\n")[-1]
    return tuple((m.group(1), m.group(2)) for m in (_TRAILER.match(line) for line in last.splitlines()) if m)


def read_image(repo: pygit2.Repository, oid: str) -> ImageInfo:
    """The image at commit ``oid``; raises when the commit is not a git-pf image."""
    commit = repo.get(oid)
    if not isinstance(commit, pygit2.Commit):
        raise UsageError(f"{oid[:12]} is not a commit")
    return image_of(repo, commit)


def image_of(repo: pygit2.Repository, commit: pygit2.Commit) -> ImageInfo:
    """The image at ``commit`` (already read, e.g. by a history walk); raises as ``read_image``."""
    oid = str(commit.id)
    tree = commit.tree_id
    try:
        manifest = read_manifest(repo, tree.raw)
    except DataError as e:
        raise DataError(f"image {oid[:12]}: {e.message}", e.code) from None
    if manifest is None:
        raise UsageError(f"{oid[:12]} is a commit but not a git-pf image (no pf.json)")
    msg = commit.message
    return ImageInfo(
        id=oid,
        tree=str(tree),
        parents=tuple(str(p) for p in commit.parent_ids),
        subject=msg.split("\n", 1)[0],
        message=msg,
        time=commit.commit_time,
        offset=commit.commit_time_offset,
        author=f"{commit.author.name} <{commit.author.email}>",
        manifest=manifest,
        trailers=parse_trailers(msg),
    )


# Manifests read ahead of a command by the command server's spare (cli.server): by root tree id
# (which never names other bytes), the pf.json's size and its parse. ``read_manifest`` hands each
# out once (no two images share a dict), where its size is within this command's pf.maxJsonLine.
AHEAD: dict[bytes, tuple[int, dict]] = {}
AHEAD_MAX = 1 << 20  # the largest pf.json read ahead


def read_ahead(repo: pygit2.Repository, tree: bytes) -> None:
    """Read and parse the manifest of image tree ``tree`` now, for ``read_manifest`` later in this
    process; nothing is kept when it has none or it does not parse (the command then says why)."""
    found = lookup(repo, tree, MANIFEST)
    if found is None or found[0] == MODE_TREE:
        return
    try:
        if blob_size(repo, found[1]) > AHEAD_MAX:  # a spare waits on no huge manifest: the command reads it
            return
        data = _layer_blob(repo, found, MANIFEST)
        AHEAD[tree] = (len(data), parse_manifest(data))
    except PfError:
        pass


def read_manifest(repo: pygit2.Repository, tree: bytes) -> dict | None:
    """The parsed ``pf.json`` of image tree ``tree``; None when there is none (the root tree
    is read once: ``pf.json`` is one of its entries)."""
    ahead = AHEAD.pop(tree, None) if AHEAD else None
    if ahead is not None and ahead[0] <= limits.active().max_json_line:
        return ahead[1]
    found = lookup(repo, tree, MANIFEST)
    if found is None or found[0] == MODE_TREE:
        return None
    return parse_manifest(_layer_blob(repo, found, MANIFEST))


def parse_manifest(data: bytes) -> dict:
    """The manifest in ``pf.json`` bytes; DataError naming what is malformed (docs/format.md, ``pf.json``)."""
    manifest = jsonl.loads(data, "pf.json")
    if not isinstance(manifest, dict):
        raise DataError("pf.json: must be a JSON object")
    if manifest.get("schema") != SCHEMA or isinstance(manifest.get("schema"), bool):
        raise DataError(f"unsupported image schema {ascii(manifest['schema'])[:40] if 'schema' in manifest else '(none)'}")
    problem = _manifest_problem(manifest)
    if problem:
        raise DataError(f"pf.json: {problem}")
    return manifest


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


_COUNTS: list[dict[str, tuple[str, ...]]] = []  # the registry's answer, once per process


def _summary_counts() -> dict[str, tuple[str, ...]]:
    """Summary fields that are counts (docs/format.md, ``pf.json``), as each layer declares
    them (``Layer.counts``); other fields are for display only."""
    if not _COUNTS:
        from ..layers import registry  # the layer packages import this module

        _COUNTS.append(registry.summary_counts())
    return _COUNTS[0]


def _manifest_problem(manifest: dict) -> str | None:
    agent = manifest.get("agent", {})
    if not isinstance(agent, dict) or not agent.keys() <= set(AGENT_KEYS) \
            or not all(isinstance(v, (str, type(None))) for v in agent.values()):
        return f"agent must be an object with only {', '.join(AGENT_KEYS)}, each a string or null"
    if not isinstance(manifest.get("label", ""), str):
        return "label must be a string"
    layers = manifest.get("layers", {})
    if not isinstance(layers, dict):
        return "layers must be an object"
    counts = _summary_counts() if layers else {}
    for name, summary in layers.items():
        if summary is None:
            continue
        if not isinstance(summary, dict):
            return f"layers.{ascii(name[:40])} must be an object or null"
        for key in counts.get(name, ()):
            if key in summary and not _is_count(summary[key]):
                return f"layers.{name}.{key} must be a non-negative integer"
    return None


def read_file(repo: pygit2.Repository, tree: str | bytes, path: bytes) -> bytes | None:
    """The bytes of the blob at ``path`` in an image tree, or None when absent (or a tree).
    A submodule entry there is damaged data: a layer file is a blob. One larger than its
    limit is refused (a DataError naming the path) before it is read: ``pf.maxJsonLine`` for
    a ``.json`` file (one JSON document), else ``pf.maxBlobSize``."""
    raw = bytes.fromhex(tree) if isinstance(tree, str) else tree
    found = lookup(repo, raw, path)
    if found is None or found[0] == MODE_TREE:
        return None
    return _layer_blob(repo, found, path)


def _layer_blob(repo: pygit2.Repository, found: tuple[int, bytes], path: bytes) -> bytes:
    """The bytes of the layer file ``path`` whose tree entry is ``found`` (mode, raw oid),
    within its limit (``read_file``)."""
    if found[0] not in (MODE_FILE, MODE_EXEC, MODE_LINK):
        raise DataError(f"{os.fsdecode(path)} is not a file (mode {found[0]:06o})")
    size = blob_size(repo, found[1])
    problem = over_limit(size, limits.active().max_json_line, "pf.maxJsonLine") if path.endswith(b".json") \
        else over_limit(size)
    if problem:
        raise DataError(f"{os.fsdecode(path)}: {problem}")
    return repo.odb.read(pygit2.Oid(raw=found[1]))[1]


def subtree(repo: pygit2.Repository, tree: str, path: bytes) -> str | None:
    found = lookup(repo, bytes.fromhex(tree), path)
    return found[1].hex() if found and found[0] == MODE_TREE else None


class TreeEdit:
    """Accumulates layer files and subtrees for a new image tree based on an old one."""

    def __init__(self, repo: pygit2.Repository, base_tree: str | None):
        self.repo = repo
        self.writer = TreeWriter(repo)
        self.base = bytes.fromhex(base_tree) if base_tree else None
        self.changes: dict[bytes, tuple[int, bytes] | None] = {}

    def put_file(self, path: bytes, data: bytes) -> None:
        self.changes[path] = (MODE_FILE, self.writer.write_blob(data))

    def put_tree(self, path: bytes, tree_hex: str) -> None:
        self.changes[path] = (MODE_TREE, bytes.fromhex(tree_hex))

    def remove(self, path: bytes) -> None:
        self.changes[path] = None

    def write(self) -> str:
        return edit(self.writer, self.repo, self.base, self.changes).hex()
