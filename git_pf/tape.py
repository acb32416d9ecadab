"""``trace/tape/``: the recorded LLM exchanges of an image (docs/format.md, "The tape").

A tape is an ordered list of exchanges, each one JSON object (request and
response bodies, nondeterminism draws; git-pf fixes no schema beyond "an
object"). Each exchange is stored as its own canonical JSON blob named
``<seq:08d>-<first 16 hex of its sha256>.json``, so unchanged exchanges keep
their blob and name from image to image, and two forks that each append
exchanges get different names and merge path-wise without conflict. String
values under secret-looking keys (``Authorization``, ``x-api-key``,
``cookie``, ``*token``, ``*secret*``, ``*password*`` ...) and values that look
like credentials are redacted unless named with ``--no-redact``.

Reads the user's tape file or directory and writes blobs through a
``TreeEdit``; moves no refs.
"""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

from . import canonjson, image as img, jsonl
from .errors import InputFormatError
from .gittree import MODE_FILE, MODE_TREE, lookup, read_blob, read_tree
from .world.env import REDACTED, looks_secret

PATH = img.TRACE_TAPE
NAME = "tape"
_SECRET_KEY = re.compile(
    r"^(authorization|proxy-authorization|cookie|set-cookie)$|api[-_]?key|secret|passw(or)?d|credential|"
    r"(^|[-_])(access|auth|bearer|id|refresh|session)?[-_]?token$", re.IGNORECASE)


def _redact(value, keep: frozenset[str], key: str | None = None):
    if isinstance(value, dict):
        return {k: _redact(v, keep, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_redact(v, keep, key) for v in value]
    if isinstance(value, str) and key not in keep and value != REDACTED:
        if (key is not None and _SECRET_KEY.search(key)) or looks_secret("", value):
            return REDACTED
    return value


def entry_name(seq: int, data: bytes) -> bytes:
    return b"%08d-%s.json" % (seq, hashlib.sha256(data).hexdigest()[:16].encode())


def encode(exchanges: list[dict], keep: frozenset[str] = frozenset()) -> list[tuple[bytes, bytes]]:
    """``(file name, canonical bytes)`` per exchange, in tape order, secrets redacted."""
    out = []
    for seq, exchange in enumerate(exchanges):
        data = canonjson.encode(_redact(exchange, keep))
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


def entries(git, tree_hex: str) -> dict[bytes, bytes]:
    """File name -> raw blob oid of each exchange of an image tree (empty when it has no tape)."""
    found = lookup(git, bytes.fromhex(tree_hex), PATH)
    if not found or found[0] != MODE_TREE:
        return {}
    return {name: oid for name, mode, oid in read_tree(git, found[1]) if mode == MODE_FILE}


def read(git, tree_hex: str) -> list[dict]:
    """The exchanges of an image tree, in tape order (empty when it has no tape)."""
    return [canonjson.loads(read_blob(git, oid)) for _, oid in sorted(entries(git, tree_hex).items())]


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
