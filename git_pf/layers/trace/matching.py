"""Matching a live request against a recorded one (docs/record.md, "Matching").

A request's identity is its method, its path and its body: a JSON body parsed and written as
canonical JSON (so key order and spacing do not count), after the same secret redaction the
tape had on the way into the image (so a live request carrying the real key matches its
redacted recording) and after deleting the ``--ignore-field`` JSONPaths (``$.a.b``,
``$.messages[2]``, ``$.messages[*].id``). A body that is not JSON counts as its (redacted)
text, or as its bytes when it is not UTF-8. Pure functions: no HTTP, no git.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re

from ... import canonjson
from ...errors import UsageError
from ...secrets import redact_json, redact_text
from . import exchange

MAX_DIFFS = 20


class _Wild:
    """``[*]`` in a JSONPath: every item of a list (or every value of an object)."""

    def __repr__(self) -> str:
        return "[*]"


WILD = _Wild()
_SEGMENT = re.compile(r"\.([^.\[\]\x00-\x1f\x7f]+)|\[(\d+)\]|\[(\*)\]")


@functools.lru_cache(maxsize=256)
def parse_ignore(spec: str) -> tuple:
    """The segments of a JSONPath (keys, list indexes, ``WILD``); a UsageError when malformed."""
    if not isinstance(spec, str) or not spec.startswith("$") or spec == "$":
        raise UsageError(f"--ignore-field: {spec!r} is not a JSONPath like $.metadata or $.messages[*].id")
    out, pos = [], 1
    while pos < len(spec):
        m = _SEGMENT.match(spec, pos)
        if not m:
            raise UsageError(f"--ignore-field: {spec!r}: cannot read it from {spec[pos:]!r} "
                             "(keys as .name, list items as [N] or [*])")
        key, index, _ = m.groups()
        out.append(key if key is not None else int(index) if index is not None else WILD)
        pos = m.end()
    return tuple(out)


def _paths(ignore) -> list[tuple]:
    return [p if isinstance(p, tuple) else parse_ignore(p) for p in ignore]


def _delete(value, path: tuple) -> None:
    """Remove what ``path`` names from ``value`` in place (nothing when it is absent)."""
    seg, rest = path[0], path[1:]
    if seg is WILD:
        if isinstance(value, list):
            targets = list(range(len(value)))
        elif isinstance(value, dict):
            targets = list(value)
        else:
            return
        if not rest:
            value.clear()
            return
    elif isinstance(seg, int):
        if not isinstance(value, list) or seg >= len(value):
            return
        targets = [seg]
    else:
        if not isinstance(value, dict) or seg not in value:
            return
        targets = [seg]
    if not rest:
        del value[targets[0]]
        return
    for t in targets:
        _delete(value[t], rest)



def normal_body(data: bytes, ignore=(), keep: frozenset[str] = frozenset()) -> tuple[str, object]:
    """What of a body counts: ``("json", value)`` redacted and without the ignored paths,
    ``("text", redacted text)``, or ``("bytes", sha256 hex)``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes", hashlib.sha256(data).hexdigest()
    try:  # a duplicate key or NaN makes it text, as redaction has it (git_pf.secrets)
        value = redact_json(canonjson.strict_loads(text), keep)
        for path in _paths(ignore):
            _delete(value, path)
        canonjson.dumps(value)  # deep or odd values fall back to text here, not later
    except (ValueError, RecursionError):
        return "text", redact_text(text, keep)
    return "json", value


def _body_of(req: dict) -> bytes:
    b = req.get("body")
    return bytes(b) if isinstance(b, (bytes, bytearray)) else exchange.body_bytes(b)


def request_key(method: str, path: str, body_bytes: bytes, ignore: tuple = (),
                keep: frozenset[str] = frozenset()) -> str:
    """sha256 hex of a request's identity: method, path and its body as ``normal_body`` has it."""
    kind, value = normal_body(body_bytes, ignore, keep)
    return hashlib.sha256(canonjson.dumps([method.upper(), path, kind, value]).encode("utf-8",
                                                                                     "surrogatepass")).hexdigest()


def diff_requests(recorded: dict, live: dict, ignore=(), keep: frozenset[str] = frozenset()) -> list[dict]:
    """How two requests (``{"method", "path", "query", "body"}``, body a BODY or bytes) differ:
    ``[{"path": "$.messages[1].content", "recorded": ..., "live": ...}]``, the first
    ``MAX_DIFFS``; a side that lacks the value has None and ``"missing": "recorded" | "live"``."""
    out: list[dict] = []
    for field in ("method", "path", "query"):
        a, b = recorded.get(field, ""), live.get(field, "")
        if field == "method":
            a, b = str(a).upper(), str(b).upper()
        if a != b:
            out.append({"path": field, "recorded": a, "live": b})
    (ka, va), (kb, vb) = (normal_body(_body_of(r), ignore, keep) for r in (recorded, live))
    if ka != kb:
        out.append({"path": "$", "recorded": va, "live": vb})
    else:
        _diff(va, vb, "$", out)
    return out[:MAX_DIFFS]


def _diff(a, b, where: str, out: list[dict]) -> None:
    if len(out) >= MAX_DIFFS:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b)):
            _diff_item(a, b, key, f"{where}.{key}" if _SIMPLE.match(key) else f"{where}[{json.dumps(key)}]", out)
    elif isinstance(a, list) and isinstance(b, list):
        for i in range(max(len(a), len(b))):
            _diff_item(a, b, i, f"{where}[{i}]", out)
    elif type(a) is not type(b) or a != b:
        out.append({"path": where, "recorded": a, "live": b})


def _diff_item(a, b, key, where: str, out: list[dict]) -> None:
    has_a = key in a if isinstance(a, dict) else key < len(a)
    has_b = key in b if isinstance(b, dict) else key < len(b)
    if has_a and has_b:
        _diff(a[key], b[key], where, out)
    elif len(out) < MAX_DIFFS:
        out.append({"path": where, "recorded": a[key] if has_a else None, "live": b[key] if has_b else None,
                    "missing": "live" if has_a else "recorded"})


_SIMPLE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_-]*\Z")
