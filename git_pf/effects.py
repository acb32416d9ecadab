"""The effects ledger: ``effects/ledger.jsonl``, one entry per tool call with a side effect.

Each entry has ``ts``, ``tool``, ``args_hash``, ``result_hash``,
``idempotency_key``, ``side_effect_class`` (pure | idempotent |
irreversible) and ``prev``: the sha256 of the previous entry's canonical
JSON (null for the first), which makes order and completeness checkable.
Entries may carry more fields; ``args`` / ``result`` given without their
hash get it derived. Spec: docs/format.md. Pure data handling.
"""
from __future__ import annotations

import hashlib

from . import canonjson, jsonl
from .errors import InputFormatError

PATH = "effects/ledger.jsonl"
CLASSES = ("pure", "idempotent", "irreversible")
REQUIRED = ("ts", "tool", "args_hash", "result_hash", "idempotency_key", "side_effect_class")


def entry_hash(entry: dict) -> str:
    return hashlib.sha256(canonjson.canonical_bytes(entry)).hexdigest()


def value_hash(value) -> str:
    return hashlib.sha256(canonjson.canonical_bytes(value)).hexdigest()


def _complete(entry: dict, where: str) -> dict:
    entry = dict(entry)
    for field, source in (("args_hash", "args"), ("result_hash", "result")):
        if field not in entry and source in entry:
            entry[field] = value_hash(entry[source])
    missing = [f for f in REQUIRED if f not in entry]
    if missing:
        raise InputFormatError(f"{where}: effect entry lacks {', '.join(missing)}")
    if entry["side_effect_class"] not in CLASSES:
        raise InputFormatError(f"{where}: side_effect_class must be one of {'|'.join(CLASSES)}")
    if not isinstance(entry["ts"], (str, int, float)) or isinstance(entry["ts"], bool):
        raise InputFormatError(f"{where}: ts must be an RFC 3339 string or a number")
    if not isinstance(entry["tool"], str) or not isinstance(entry["idempotency_key"], str):
        raise InputFormatError(f"{where}: tool and idempotency_key must be strings")
    return entry


def chain(entries: list[dict], where: str) -> list[dict]:
    """Complete and chain entries: a missing ``prev`` is filled in, a wrong one is an error
    naming the line (``where:N``)."""
    out: list[dict] = []
    prev = None
    for lineno, raw in enumerate(entries, 1):
        entry = _complete(raw, f"{where}:{lineno}")
        if "prev" in entry and entry["prev"] != prev:
            raise InputFormatError(f"{where}:{lineno}: effects chain broken (prev does not match entry {lineno - 1})")
        entry["prev"] = prev
        prev = entry_hash(entry)
        out.append(entry)
    return out


def verify(entries: list[dict]) -> list[str]:
    """Problems with a stored ledger, one line each (empty when sound)."""
    problems = []
    prev = None
    for lineno, entry in enumerate(entries, 1):
        missing = [f for f in REQUIRED + ("prev",) if f not in entry]
        if missing:
            problems.append(f"entry {lineno} lacks {', '.join(missing)}")
        elif entry["prev"] != prev:
            problems.append(f"entry {lineno}: chain broken (prev does not match entry {lineno - 1})")
        prev = entry_hash(entry)
    return problems


def encode(entries: list[dict]) -> bytes:
    return canonjson.encode_lines(entries)


def decode(data: bytes) -> list[dict]:
    return jsonl.parse(data, PATH)
