"""Canonical JSON: the one byte encoding of every JSON document git-pf stores.

Sorted keys, separators ``,`` and ``:``, UTF-8 without ASCII escaping, no
NaN/Infinity, a trailing newline for whole documents. A document whose
strings hold unpaired surrogates (text that was not valid UTF-8, read with
``surrogateescape``) is written with ASCII escapes instead, so it stays valid
UTF-8 and still round-trips. The same value always
gives the same bytes, so the same state always gives the same git tree id.
Pure functions; no I/O.
"""
from __future__ import annotations

import json
from typing import Any

from . import limits
from .errors import DataError


def dumps(value: Any) -> str:
    """The canonical text of ``value`` (one line, no trailing newline)."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any) -> bytes:
    """A canonical JSON document: ``dumps(value)`` + newline, as UTF-8."""
    text = dumps(value)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        escaped = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
        return (escaped + "\n").encode("ascii")


def encode_lines(values: list[Any]) -> bytes:
    """Canonical JSONL: one canonical object per line, each ending in a newline."""
    return b"".join(encode(v) for v in values)


def check_length(data: bytes | str) -> None:
    """DataError when a JSON document read from an image is longer than ``pf.maxJsonLine``
    (so it is refused before it is parsed)."""
    limit = limits.active().max_json_line
    if len(data) > limit:
        raise DataError(f"a JSON document of {len(data)} bytes in an image is over pf.maxJsonLine ({limit})")


def loads(data: bytes | str) -> Any:
    """One JSON document read from an image, after ``check_length``."""
    check_length(data)
    return json.loads(data)


def strict_loads(text: str | bytes) -> Any:
    """``json.loads`` that refuses (ValueError) a duplicate key and NaN / Infinity: a parser
    keeps one value of a duplicate key, and what it drops must not escape a check or redaction."""
    return json.loads(text, object_pairs_hook=_unique_keys, parse_constant=_no_constant)


def _unique_keys(pairs: list) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _no_constant(name: str):
    raise ValueError(name)


def canonical_bytes(value: Any) -> bytes:
    """The canonical bytes of one value without the trailing newline (what gets hashed)."""
    return encode(value)[:-1]
