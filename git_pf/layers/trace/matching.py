"""Matching a live request against a recorded one (docs/record.md, "Matching").

A request's identity is its method, its path and its body: a JSON body parsed and written as
canonical JSON (so key order and spacing do not count), after the same secret redaction the
tape had on the way into the image (so a live request carrying the real key matches its
redacted recording), after masking the ``--mask`` regexes inside the strings under their
JSONPath (``$.system[*].text=Today.s date is [0-9-]+``: each match reads ``<masked>``) and after
deleting the ``--ignore-field`` JSONPaths (``$.a.b``, ``$.messages[2]``, ``$.messages[*].id``).
``Rules`` holds both, as a run stores them in its tape (an exchange's ``match``). A body that
is not JSON counts as its (redacted, ``$``-masked) text, or as its bytes when it is not UTF-8.
Pure functions: no HTTP, no git.
"""
from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass

from ...core import canonjson
from ...core.errors import DataError, UsageError
from ...core.secrets import redact_json, redact_text
from . import exchange

MAX_DIFFS = 20
MASKED = "<masked>"
MAX_RULE = 1000  # characters of one stored ignore path or mask (a tape is untrusted)
MAX_RULES = 200


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


@functools.lru_cache(maxsize=256)
def parse_mask(spec: str) -> tuple[tuple, re.Pattern]:
    """``JSONPATH=REGEX`` as (segments, compiled regex); ``$`` alone is the whole body. A UsageError
    when either half is malformed. The path is cut at the first ``=``."""
    path, sep, rx = spec.partition("=") if isinstance(spec, str) else ("", "", "")
    if not sep or not rx:
        raise UsageError(f"--mask: {spec!r} is not JSONPATH=REGEX (like '$.system[*].text=Today.s date is [0-9-]+')")
    try:
        segments = () if path == "$" else parse_ignore(path)
    except UsageError:
        raise UsageError(f"--mask: {path!r} is not a JSONPath like $ or $.system[*].text") from None
    try:
        return segments, re.compile(rx)
    except re.error as e:
        raise UsageError(f"--mask: {rx!r} is not a regular expression: {e}") from None


@dataclass(frozen=True)
class Rules:
    """What matching leaves out: JSONPaths deleted (``ignore``) and ``JSONPATH=REGEX`` masks."""
    ignore: tuple[str, ...] = ()
    masks: tuple[str, ...] = ()

    def __post_init__(self):
        for spec in self.ignore:
            parse_ignore(spec)
        for spec in self.masks:
            parse_mask(spec)

    def __or__(self, other: "Rules") -> "Rules":
        return Rules(tuple(dict.fromkeys(self.ignore + other.ignore)), tuple(dict.fromkeys(self.masks + other.masks)))

    def __bool__(self) -> bool:
        return bool(self.ignore or self.masks)

    def to_json(self) -> dict:
        return {"ignore": list(self.ignore), "mask": list(self.masks)}

    @classmethod
    def from_json(cls, obj, where: str = "match") -> "Rules":
        """The rules an exchange's ``match`` holds (untrusted: a DataError naming the field)."""
        if not isinstance(obj, dict):
            raise DataError(f"{where}: must be an object")
        out = {}
        for key in ("ignore", "mask"):
            items = obj.get(key, [])
            if not isinstance(items, list) or len(items) > MAX_RULES \
                    or not all(isinstance(i, str) and 0 < len(i) <= MAX_RULE for i in items):
                raise DataError(f"{where}.{key}: must be a list of at most {MAX_RULES} strings")
            out[key] = tuple(items)
        if not isinstance(obj.get("profile", ""), str):
            raise DataError(f"{where}.profile: must be a string")
        try:
            return cls(out["ignore"], out["mask"])
        except UsageError as e:
            raise DataError(f"{where}: {e}") from None


def as_rules(ignore) -> Rules:
    """``Rules`` from rules or a tuple of ``--ignore-field`` paths."""
    return ignore if isinstance(ignore, Rules) else Rules(tuple(ignore))


def rules_of(entries) -> Rules:
    """The rules stored with a run: the union of its exchanges' ``match`` (none in older tapes)."""
    out = Rules()
    for e in entries:
        if isinstance(e, dict) and e.get("match") is not None:
            out = out | Rules.from_json(e["match"], f"step {e.get('step')}: match")
    return out


def _paths(ignore) -> list[tuple]:
    return [p if isinstance(p, tuple) else parse_ignore(p) for p in ignore]


def _mask_strings(value, rx: re.Pattern):
    if isinstance(value, str):
        return rx.sub(MASKED, value)
    if isinstance(value, list):
        return [_mask_strings(v, rx) for v in value]
    if isinstance(value, dict):
        return {k: _mask_strings(v, rx) for k, v in value.items()}
    return value


def _mask(value, path: tuple, rx: re.Pattern):
    """``value`` with every string under ``path`` (at any depth below it) masked by ``rx``."""
    if not path:
        return _mask_strings(value, rx)
    seg, rest = path[0], path[1:]
    if seg is WILD:
        if isinstance(value, list):
            return [_mask(v, rest, rx) for v in value]
        if isinstance(value, dict):
            return {k: _mask(v, rest, rx) for k, v in value.items()}
    elif isinstance(seg, int):
        if isinstance(value, list) and seg < len(value):
            return value[:seg] + [_mask(value[seg], rest, rx)] + value[seg + 1:]
    elif isinstance(value, dict) and seg in value:
        return dict(value, **{seg: _mask(value[seg], rest, rx)})
    return value


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
    """What of a body counts (``ignore``: ``Rules`` or ``--ignore-field`` paths): ``("json", value)``
    redacted, masked and without the ignored paths,
    ``("text", redacted text)``, or ``("bytes", sha256 hex)``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes", hashlib.sha256(data).hexdigest()
    rules = as_rules(ignore)
    masks = [parse_mask(m) for m in rules.masks]
    try:  # a duplicate key or NaN makes it text, as redaction has it (git_pf.core.secrets)
        value = redact_json(canonjson.strict_loads(text), keep)
        for path, rx in masks:
            value = _mask(value, path, rx)
        for path in _paths(rules.ignore):
            _delete(value, path)
        canonjson.dumps(value)  # deep or odd values fall back to text here, not later
    except (ValueError, RecursionError):
        text = redact_text(text, keep)
        for path, rx in masks:
            if not path:
                text = rx.sub(MASKED, text)
        return "text", text
    return "json", value


def _body_of(req: dict) -> bytes:
    b = req.get("body")
    return bytes(b) if isinstance(b, (bytes, bytearray)) else exchange.body_bytes(b)


def request_key(method: str, path: str, body_bytes: bytes, ignore=(),
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
