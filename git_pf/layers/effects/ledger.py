"""The effects ledger: ``effects/ledger.jsonl``, one entry per tool call with a side effect.

Each entry has ``ts``, ``tool``, ``args_hash``, ``result_hash``,
``idempotency_key``, ``side_effect_class`` (pure | idempotent |
irreversible) and ``prev``: the sha256 of the previous entry's canonical
JSON (null for the first), which makes order and completeness checkable.
Entries may carry more fields; ``args`` / ``result`` given without their
hash get it derived. The ledger only grows along first-parent history
(``first_difference``) and holds no irreversible effect twice
(``repeated_irreversible``). Spec: docs/format.md. Pure data handling.
"""
from __future__ import annotations

import hashlib

from ...core import canonjson, jsonl
from ...core.errors import DataError, InputFormatError

PATH = "effects/ledger.jsonl"
CLASSES = ("pure", "idempotent", "irreversible")
REQUIRED = ("ts", "tool", "args_hash", "result_hash", "idempotency_key", "side_effect_class")
REWRITE_TRAILER = "Pf-Rewrite-Effects"  # on an image whose ledger deliberately does not extend its parent's


def entry_hash(entry: dict) -> str:
    return value_hash(entry)


def value_hash(value) -> str:
    try:
        return hashlib.sha256(canonjson.canonical_bytes(value)).hexdigest()
    except ValueError:  # NaN or Infinity: JSON parsers take them, canonical JSON has no form for them
        raise InputFormatError("an effect entry holds NaN or Infinity, which canonical JSON cannot encode") from None


def _complete(entry: dict, where: str) -> dict:
    entry = dict(entry)
    for field, source in (("args_hash", "args"), ("result_hash", "result")):
        if field not in entry and source in entry:
            entry[field] = value_hash(entry[source])
    problem = _field_problem(entry)
    if problem:
        raise InputFormatError(f"{where}: {problem}")
    return entry


def _field_problem(entry: dict) -> str | None:
    """What is wrong with an entry's required fields, or None."""
    missing = [f for f in REQUIRED if f not in entry]
    if missing:
        return f"effect entry lacks {', '.join(missing)}"
    if not isinstance(entry["side_effect_class"], str) or entry["side_effect_class"] not in CLASSES:
        return f"side_effect_class must be one of {'|'.join(CLASSES)}"
    if not isinstance(entry["ts"], (str, int, float)) or isinstance(entry["ts"], bool):
        return "ts must be an RFC 3339 string or a number"
    if not all(isinstance(entry[f], str) for f in ("tool", "idempotency_key", "args_hash", "result_hash")):
        return "tool, idempotency_key, args_hash and result_hash must be strings"
    return None


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
        problem = _field_problem(entry) or (None if "prev" in entry else "effect entry lacks prev")
        if problem:
            problems.append(f"entry {lineno}: {problem}")
        elif entry["prev"] != prev:
            problems.append(f"entry {lineno}: chain broken (prev does not match entry {lineno - 1})")
        prev = entry_hash(entry)
    return problems


def quote(value) -> str:
    """A value from a ledger quoted on one line and cut short, for messages."""
    text = value if isinstance(value, str) else canonjson.dumps(value)
    return repr(text if len(text) <= 80 else text[:77] + "...")


def label(entry: dict) -> str:
    """An entry's idempotency key, quoted (``quote``)."""
    return quote(entry.get("idempotency_key"))


def first_difference(base: list[dict], entries: list[dict]) -> int | None:
    """The index of the first entry of ``base`` that ``entries`` does not hold at the same
    place (compared by entry hash, so by content and chain); None when ``entries`` starts
    with all of ``base``, i.e. extends it."""
    for i, old in enumerate(base):
        if i >= len(entries) or entry_hash(entries[i]) != entry_hash(old):
            return i
    return None


def extension_problem(base: list[dict], entries: list[dict]) -> str | None:
    """One line saying where ``entries`` stops extending ``base``, or None when it does."""
    i = first_difference(base, entries)
    if i is None:
        return None
    state = "is missing" if i >= len(entries) else "differs"
    return f"entry {i + 1} ({label(base[i])}) {state}"


def repeated_irreversible(entries: list[dict]) -> list[tuple[str, int, int]]:
    """Irreversible effects recorded more than once under one idempotency key:
    ``(quoted key, first line, repeated line)`` for each repeat, in ledger order."""
    first: dict = {}
    out = []
    for lineno, entry in enumerate(entries, 1):
        key = entry.get("idempotency_key")
        if entry.get("side_effect_class") != "irreversible" or not isinstance(key, str):
            continue
        if key in first:
            out.append((label(entry), first[key], lineno))
        else:
            first[key] = lineno
    return out


def encode(entries: list[dict]) -> bytes:
    return canonjson.encode_lines(entries)


def decode(data: bytes) -> list[dict]:
    """The entries of an image's ledger (image data: a malformed line is a ``DataError``)."""
    return jsonl.parse(data, PATH, DataError)
