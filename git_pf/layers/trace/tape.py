"""``trace/tape/``: the recorded LLM exchanges of an image (docs/format.md, "The tape").

A tape is an ordered list of exchanges, each one JSON object (request and
response bodies, nondeterminism draws): any object, or, with ``"v": 2``, an
entry of a recorded run as ``exchange`` specifies it. Each exchange is one
canonical JSON document named ``<seq:08d>-<first 16 hex of its sha256>.json``;
it is stored either as its own blob of that name (a loose entry: the tape of a
recording's step image, up to its last unfinished chunk, and every tape written
before packed chunks) or inside a packed chunk of consecutive entries
(``tapechunk``: a tape written whole, and every full chunk of a recording). Tape
order is entry name order; an entry held twice is one. Unchanged entries and
chunks keep their blob and name from image to image, and two forks that each
append exchanges get different names and merge path-wise without conflict.
Secrets are redacted on the way in by ``secrets.redact_json`` (values under
secret-looking keys and header names, credentials inside text, URLs and
JSON-in-string bodies) unless their key is named with ``--no-redact``.

A stored tape is untrusted: reading one checks every entry's and chunk's name,
size and content (a chunk's sizes before it is decompressed), and a malformed
one is a ``DataError`` naming it. Reads the user's tape file or directory and
writes blobs through a ``TreeEdit``; moves no refs.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pygit2

from ...core import canonjson, jsonl, limits
from ...image import manifest as img
from ...core.errors import DataError, InputFormatError, MissingObject, PfError
from ...image.tree import MODE_FILE, MODE_TREE, lookup, read_blob, read_tree
from ...image.safepath import show
from ...core.secrets import redact_json
from . import tapechunk
from .exchange import is_v2, parse_entry

PATH = img.TRACE_TAPE
NAME = "tape"
_ENTRY_NAME = re.compile(rb"\A[0-9]{8}-[0-9a-f]{16}\.json\Z")


def entry_name(seq: int, data: bytes) -> bytes:
    return b"%08d-%s.json" % (seq, hashlib.sha256(data).hexdigest()[:16].encode())


def encode(exchanges: list[dict], keep: frozenset[str] = frozenset()) -> list[tuple[bytes, bytes]]:
    """``(file name, canonical bytes)`` per exchange, in tape order, secrets redacted."""
    out = []
    for seq, exchange in enumerate(exchanges):
        try:
            data = canonjson.encode(redact_json(exchange, keep))
        except RecursionError:
            raise InputFormatError(f"exchange {seq} is nested too deeply", param="tape") from None
        out.append((entry_name(seq, data), data))
    return out


def read_input(path: Path, flag: str = "--tape") -> list[dict]:
    """Exchanges from a JSONL file (one object per line) or a directory of ``*.json`` files
    as ``git pf checkout --layers trace`` writes them (taken in name order)."""
    path = Path(path)
    if not path.is_dir():
        return jsonl.read(path, flag)
    out = []
    for f in sorted(path.glob("*.json")):
        obj = jsonl.read_json(f, flag)
        if not isinstance(obj, dict):
            raise InputFormatError(f"{flag}: '{f}' must hold one JSON object")
        out.append(obj)
    return out


def _where(name: bytes, chunk: bytes | None = None) -> str:
    """An entry's path for an error message (and the chunk holding it): one line, whatever bytes the names hold."""
    return PATH.decode() + "/" + show(name) + (f" (in {show(chunk)})" if chunk is not None else "")


def items(git, tree_hex: str) -> list[tuple[bytes, bytes]]:
    """``(name, raw oid)`` of each loose entry and packed chunk of an image tree's tape, in tree
    order (empty when it has no tape). Anything else there is a DataError."""
    found = lookup(git, bytes.fromhex(tree_hex), PATH)
    if not found:
        return []
    if found[0] != MODE_TREE:
        raise DataError(f"{PATH.decode()}: not a directory")
    return [(check_name(name, mode), oid) for name, mode, oid in read_tree(git, found[1])]


def check_name(name: bytes, mode: int) -> bytes:
    """``name`` when it names a loose entry or a chunk (a file), else a DataError naming it."""
    if mode != MODE_FILE or not (_ENTRY_NAME.match(name) or tapechunk.span(name)):
        raise DataError(f"{_where(name)}: not a tape entry (a file named <seq:08d>-<16 hex>.json, or a "
                        "chunk named <seq:08d>+<count:04d>-<16 hex>[-<16 hex>].zst or .col.zst)")
    return name


def _blob(git, oid: bytes, limit: int, what: str, where: str) -> bytes:
    """Blob ``oid``, read only once its header says it is at most ``limit`` bytes."""
    try:
        size = git.odb.read_header(pygit2.Oid(raw=oid))[1]
    except (KeyError, pygit2.GitError):
        raise MissingObject(f"{where}: blob {oid.hex()} is missing") from None
    if size > limit:
        raise DataError(f"{where}: {size} bytes, over {what}")
    return read_blob(git, oid, limit)


def load(git, name: bytes, oid: bytes, base: tapechunk.Base | None = None) -> list[tuple[bytes, bytes, str]]:
    """``(entry name, bytes, where)`` of each entry a loose entry or a chunk holds, its size, hash
    and (for a chunk) frame checked; a DataError or MissingObject naming it. ``base``: the tape's
    Base, for a chunk compressed against it (``opened`` finds it)."""
    return opened(git, name, oid, base)[0]


def opened(git, name: bytes, oid: bytes, base: tapechunk.Base | None = None):
    """``load``'s entries, and the Base the chunk gives the rest of its tape (its first column
    chunk), if it does."""
    limit = limits.active().max_json_line
    span = tapechunk.span(name)
    if span is None:
        data = _blob(git, oid, limit, "pf.maxJsonLine", _where(name))
        if name[9:25].decode() != hashlib.sha256(data).hexdigest()[:16]:
            parse(data, _where(name))  # an entry that is no JSON object is named as that first
            raise DataError(f"{_where(name)}: its name does not match its content")
        return [(name, data, _where(name))], None
    blob = _blob(git, oid, tapechunk.stored_cap(span[1]), "a chunk's size bound", _where(name))
    out = []
    entries, gives = tapechunk.unpack(name, blob, _where(name), base)
    for seq, data in enumerate(entries, span[0]):
        member = entry_name(seq, data)
        if len(data) > limit:
            raise DataError(f"{_where(member, name)}: {len(data)} bytes, over pf.maxJsonLine")
        out.append((member, data, _where(member, name)))
    return out, gives


def bases(git, files: list[tuple[bytes, bytes]]) -> dict[bytes, tapechunk.Base]:
    """The Bases of a tape's ``(name, raw oid)`` files, by digest: those its sound column chunks
    from seq 0 give (a bad one gives none; reading it names its problem)."""
    found = {}
    for name, oid in files:
        if name.startswith(b"00000000+") and name.endswith(b".col.zst") and tapechunk.span(name):
            try:
                base = opened(git, name, oid)[1]
            except PfError:
                continue
            found[base.digest] = base
    return found


def loaded(git, files: list[tuple[bytes, bytes]]) -> dict[bytes, tuple[bytes, bytes, str]]:
    """Entry name -> ``load``'s triple, for every entry of a tape's ``(name, raw oid)`` files, a
    chunk compressed against its tape's Base opened after the chunk that gives it; an entry held
    twice is given once."""
    found, given, later = {}, {}, []
    for name, oid in files:
        if tapechunk.span(name) and tapechunk.base_of(name):
            later.append((name, oid))
            continue
        entries, gives = opened(git, name, oid)
        if gives is not None:
            given[gives.digest] = gives
        for entry in entries:
            found.setdefault(entry[0], entry)
    for name, oid in later:
        for entry in load(git, name, oid, given.get(tapechunk.base_of(name))):
            found.setdefault(entry[0], entry)
    return found


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")


def parse(data: bytes, where: str) -> dict:
    """One stored exchange: a JSON object; a v2 entry (``"v": 2``) is also checked field by
    field (``exchange.parse_entry``)."""
    try:
        obj = json.loads(data, parse_constant=_not_json)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        raise DataError(f"{where}: not valid JSON") from None
    if not isinstance(obj, dict):
        raise DataError(f"{where}: must hold one JSON object")
    return parse_entry(obj, where) if is_v2(obj) else obj


def stored(git, tree_hex: str) -> list[tuple[bytes, bytes, str]]:
    """Every entry of the tape, loose or packed, as ``load`` gives them, in tape order (entry name
    order); an entry held twice (the same name: the same bytes) is given once."""
    found = loaded(git, items(git, tree_hex))
    return [found[name] for name in sorted(found)]


def names(git, tree_hex: str) -> set[bytes]:
    """The entry names of the tape (a chunk is opened for its entries' names)."""
    return {name for name, _, _ in stored(git, tree_hex)}


def read(git, tree_hex: str) -> list[dict]:
    """The exchanges of an image tree, in tape order (empty when it has no tape)."""
    return [parse(data, where) for _, data, where in stored(git, tree_hex)]


def summary(exchanges: int) -> dict:
    """The manifest summary of a tape (``layers.tape``)."""
    return {"exchanges": exchanges}


def merged_summary(git, ours_tree: str, changes: dict) -> dict | None:
    """``layers.tape`` after a merge applied ``changes`` to ours' tree; None when the tape did not change."""
    prefix = PATH + b"/"
    touched = {p[len(prefix):]: c for p, c in changes.items() if p.startswith(prefix)}
    if not touched:
        return None
    found = dict(items(git, ours_tree))
    for name, change in touched.items():
        if change is None:
            found.pop(name, None)
        else:
            found[name] = change[1]
    return summary(len(loaded(git, list(found.items()))))


def layout(files: list[tuple[bytes, bytes]], sealed: bool = False) -> list[tuple[bytes, bytes]]:
    """``(file name, blob)`` of the tape ``files`` (``encode``'s) as stored: each full chunk
    (``tapechunk.groups``) packed, each after the first against the first's columns when it has
    them, the last chunk's entries loose unless it is full or ``sealed`` (a recorded run's end)."""
    out, seq, base = [], 0, None
    cut = tapechunk.groups([data for _, data in files])
    for i, group in enumerate(cut):
        if i < len(cut) - 1 or sealed or len(group) == tapechunk.CHUNK_ENTRIES:
            name, blob, gives = tapechunk.pack(seq, group, base)
            out.append((name, blob))
            base = base or gives
        else:
            out += files[seq:]
        seq += len(group)
    return out


class TapeInput:
    """A tape to write into the next snapshot (replaces the parent's tape, like --messages), laid out by ``layout``."""

    name = NAME

    def __init__(self, exchanges: list[dict], keep: frozenset[str] = frozenset()):
        self.entries = encode(exchanges, keep)  # (entry name, canonical bytes), in tape order
        self.count = len(self.entries)
        self.files = layout(self.entries)

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        if not self.files:
            edit.remove(PATH)
            return summary(0)
        tree = edit.writer.write((name, MODE_FILE, edit.writer.write_blob(data)) for name, data in self.files)
        edit.put_tree(PATH, tree.hex())
        return summary(self.count)
