"""``trace/tape/``: the recorded LLM exchanges of an image (docs/format.md, "The tape").

A tape is an ordered list of exchanges, each one JSON object (request and
response bodies, nondeterminism draws): any object, or, with ``"v": 2``, an
entry of a recorded run as ``exchange`` specifies it. Each exchange is stored
as its own canonical JSON blob named ``<seq:08d>-<first 16 hex of its
sha256>.json``, so unchanged exchanges keep their blob and name from image to
image, and two forks that each append exchanges get different names and merge
path-wise without conflict. Secrets
are redacted on the way in by ``secrets.redact_json`` (values under
secret-looking keys and header names, credentials inside text, URLs and
JSON-in-string bodies) unless their key is named with ``--no-redact``.

A stored tape is untrusted: reading one checks every entry's name, size and
content, and a malformed one is a ``DataError`` naming it. Reads the user's
tape file or directory and writes blobs through a ``TreeEdit``; moves no refs.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pygit2

from ... import canonjson, image as img, jsonl, limits
from ...errors import DataError, InputFormatError, MissingObject
from ...gittree import MODE_FILE, MODE_TREE, lookup, read_blob, read_tree
from ...safepath import show
from ...secrets import redact_json
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


def _where(name: bytes) -> str:
    """An entry's path for an error message: one line, whatever bytes the name holds."""
    return PATH.decode() + "/" + show(name)


def entries(git, tree_hex: str) -> dict[bytes, bytes]:
    """File name -> raw blob oid of each exchange of an image tree (empty when it has no tape).
    An entry that is not a file named ``<seq:08d>-<16 hex>.json`` is a DataError."""
    found = lookup(git, bytes.fromhex(tree_hex), PATH)
    if not found:
        return {}
    if found[0] != MODE_TREE:
        raise DataError(f"{PATH.decode()}: not a directory")
    out = {}
    for name, mode, oid in read_tree(git, found[1]):
        if mode != MODE_FILE or not _ENTRY_NAME.match(name):
            raise DataError(f"{_where(name)}: not a tape entry (a file named <seq:08d>-<16 hex>.json)")
        out[name] = oid
    return out


def _not_json(name: str):
    raise ValueError(f"{name} is not JSON")


def read_entry(git, name: bytes, oid: bytes) -> dict:
    """One stored exchange: a JSON object within the size limit whose name carries its hash;
    a v2 entry (``"v": 2``) is also checked field by field (``exchange.parse_entry``)."""
    try:
        size = git.odb.read_header(pygit2.Oid(raw=oid))[1]
    except KeyError:
        raise MissingObject(f"{_where(name)}: blob {oid.hex()} is missing") from None
    if size > limits.active().max_json_line:
        raise DataError(f"{_where(name)}: {size} bytes, over pf.maxJsonLine")
    data = read_blob(git, oid)
    try:
        obj = json.loads(data, parse_constant=_not_json)
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        raise DataError(f"{_where(name)}: not valid JSON") from None
    if not isinstance(obj, dict):
        raise DataError(f"{_where(name)}: must hold one JSON object")
    if name[9:25].decode() != hashlib.sha256(data).hexdigest()[:16]:
        raise DataError(f"{_where(name)}: its name does not match its content")
    return parse_entry(obj, _where(name)) if is_v2(obj) else obj


def read(git, tree_hex: str) -> list[dict]:
    """The exchanges of an image tree, in tape order (empty when it has no tape)."""
    return [read_entry(git, name, oid) for name, oid in sorted(entries(git, tree_hex).items())]


def summary(exchanges: int) -> dict:
    """The manifest summary of a tape (``layers.tape``)."""
    return {"exchanges": exchanges}


def merged_summary(git, ours_tree: str, changes: dict) -> dict | None:
    """``layers.tape`` after a merge applied ``changes`` to ours' tree; None when the tape did not change."""
    prefix = PATH + b"/"
    touched = {p: c for p, c in changes.items() if p.startswith(prefix)}
    if not touched:
        return None
    names = {prefix + name for name in entries(git, ours_tree)}
    for path, change in touched.items():
        (names.discard if change is None else names.add)(path)
    return summary(len(names))


class TapeInput:
    """A tape to write into the next snapshot (replaces the parent's tape, like --messages)."""

    name = NAME

    def __init__(self, exchanges: list[dict], keep: frozenset[str] = frozenset()):
        self.files = encode(exchanges, keep)

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        if not self.files:
            edit.remove(PATH)
            return summary(0)
        tree = edit.writer.write((name, MODE_FILE, edit.writer.write_blob(data)) for name, data in self.files)
        edit.put_tree(PATH, tree.hex())
        return summary(len(self.files))
