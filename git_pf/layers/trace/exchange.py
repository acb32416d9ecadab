"""Tape entry v2: one recorded HTTP exchange of a run, or the run's ``end`` (docs/record.md,
"Tape format v2").

An exchange keeps the request (method, path, query, allow-listed headers, body bytes) and the
response (status, allow-listed headers, body bytes, or for a stream each chunk as it arrived
with its delay), the step it ended, the order its request arrived in, its concurrent batch and
the in-process draws made before it. Bodies are ``{"text": ...}`` (UTF-8 exactly as sent) or
``{"b64": ...}``. This module encodes bodies and headers, and checks an untrusted entry read
from an image (``parse_entry``: a ``DataError`` naming it). Pure data: no HTTP, no git.
"""
from __future__ import annotations

import base64
import binascii
import math
import re
from typing import Iterable

from ...core.errors import DataError

VERSION = 2
APIS = ("openai.chat", "openai.responses", "anthropic.messages", "other")
KEPT_HEADERS = frozenset({
    "content-type", "openai-model", "openai-processing-ms", "openai-version", "x-request-id", "request-id",
    "anthropic-version", "anthropic-beta", "retry-after", "retry-after-ms", "x-should-retry"})
KEPT_PREFIXES = ("x-ratelimit-", "anthropic-ratelimit-")

_TAPE = "trace/tape"
_MAX_INT = 1 << 40  # step, arrival and batch numbers; exit codes are smaller
_METHOD = re.compile(r"\A[A-Z]{1,16}\Z")
_HEADER_NAME = re.compile(r"\A[a-z0-9!#$%&'*+.^_`|~-]{1,128}\Z")
_BAD_TEXT = re.compile(r"[\x00-\x1f\x7f]")  # no control characters in a path, query or header value


def header_kept(name: str) -> bool:
    """Whether a (lower-case) header name is on the allow-list (never a credential or cookie)."""
    return name in KEPT_HEADERS or name.startswith(KEPT_PREFIXES)


def keep_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The allow-listed headers, names lower-cased; a repeated header's values joined by ``, ``."""
    out: dict[str, str] = {}
    for name, value in headers:
        name = name.lower()
        if header_kept(name):
            out[name] = f"{out[name]}, {value}" if name in out else value
    return out


def body(data: bytes) -> dict:
    """The BODY of ``data``: ``{"text": ...}`` when it is UTF-8, else ``{"b64": ...}``."""
    try:
        return {"text": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"b64": base64.b64encode(data).decode("ascii")}


def body_bytes(b: dict | None) -> bytes:
    """The bytes of a BODY (empty for None)."""
    if b is None:
        return b""
    try:
        if "text" in b:
            return b["text"].encode("utf-8")
        return base64.b64decode(b["b64"], validate=True)
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError):
        raise DataError("a tape body must be {\"text\": ...} or {\"b64\": ...} with valid base64") from None


def response_bytes(resp: dict) -> bytes:
    """A response's body: its ``body``, or its chunks joined when it was streamed."""
    if resp.get("chunks") is not None:
        return b"".join(body_bytes(c["data"]) for c in resp["chunks"])
    return body_bytes(resp.get("body"))


def is_v2(obj: dict) -> bool:
    """Whether a tape entry claims format v2 (a v1 entry is any object without ``"v": 2``)."""
    return obj.get("v") == VERSION


def exchanges(entries: list[dict]) -> list[dict]:
    """The v2 exchanges of a tape, in step order; two with one step number is a DataError."""
    out = sorted((e for e in entries if is_v2(e) and e.get("kind") == "exchange"), key=lambda e: e["step"])
    for a, b in zip(out, out[1:]):
        if a["step"] == b["step"]:
            raise DataError(f"{_TAPE}: step {a['step']} is recorded twice")
    return out


def end(entries: list[dict]) -> dict | None:
    """The run's ``end`` entry (the last one, when a tape holds several), or None."""
    found = [e for e in entries if is_v2(e) and e.get("kind") == "end"]
    return found[-1] if found else None


# -- checking an untrusted entry ----------------------------------------------------------

def parse_entry(obj: dict, where: str) -> dict:
    """``obj`` when it is a well-formed v2 entry, else a DataError ``where: field ...``."""
    check = _Check(where)
    check.object(obj, "entry")
    if obj.get("v") != VERSION or type(obj.get("v")) is not int:
        check.fail("v", "must be 2")
    kind = obj.get("kind")
    if kind == "exchange":
        check.count(obj, "step", 1)
        check.count(obj, "arrival", 1)
        check.count(obj, "batch", 1)
        if obj["batch"] > obj["arrival"]:
            check.fail("batch", "must not be after its arrival")
        if obj.get("api") not in APIS:
            check.fail("api", "must be one of " + ", ".join(APIS))
        _request(check, obj.get("request"))
        _response(check, obj.get("response"))
        check.number(obj, "ms")
        if obj.get("match") is not None:
            from .matching import Rules

            Rules.from_json(obj["match"], f"{where}: match")
    elif kind == "end":
        check.count(obj, "step", 0)
        if type(obj.get("exit")) is not int or not -(1 << 31) <= obj["exit"] < 1 << 31:
            check.fail("exit", "must be an integer exit code")
    else:
        check.fail("kind", 'must be "exchange" or "end"')
    _draws(check, obj.get("draws"))
    return obj


class _Check:
    """Raises the one-line DataError of a malformed field."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, field: str, what: str):
        raise DataError(f"{self.where}: {field} {what}")

    def object(self, value, field: str) -> dict:
        if not isinstance(value, dict):
            self.fail(field, "must be an object")
        return value

    def count(self, obj: dict, field: str, least: int) -> None:
        value = obj.get(field)
        if type(value) is not int or not least <= value < _MAX_INT:
            self.fail(field, f"must be an integer >= {least}")

    def number(self, obj: dict, field: str, prefix: str = "") -> None:
        value = obj.get(field)
        if type(value) not in (int, float) or not math.isfinite(value) or value < 0:
            self.fail(prefix + field, "must be a number >= 0")

    def text(self, value, field: str, pattern: re.Pattern | None = None) -> None:
        if not isinstance(value, str) or _BAD_TEXT.search(value) or (pattern and not pattern.match(value)):
            self.fail(field, "must be a string without control characters" if pattern is None
                      else "is not well-formed")

    def body(self, value, field: str) -> None:
        if not isinstance(value, dict) or len(value) != 1:
            self.fail(field, 'must be {"text": ...} or {"b64": ...}')
        if "text" in value:
            if not isinstance(value["text"], str):
                self.fail(field + ".text", "must be a string")
            try:
                value["text"].encode("utf-8")
            except UnicodeEncodeError:
                self.fail(field + ".text", "is not valid UTF-8 text")
        elif "b64" not in value or not isinstance(value["b64"], str):
            self.fail(field, 'must be {"text": ...} or {"b64": ...}')
        else:
            try:
                base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError):
                self.fail(field + ".b64", "is not valid base64")

    def headers(self, value, field: str) -> None:
        self.object(value, field)
        for name, v in value.items():
            if not _HEADER_NAME.match(name) or not header_kept(name):
                self.fail(field, "holds a header that is not on the allow-list")
            self.text(v, f"{field}.{name}")


def _request(check: _Check, req) -> None:
    check.object(req, "request")
    check.text(req.get("method"), "request.method", _METHOD)
    path = req.get("path")
    check.text(path, "request.path")
    if not path.startswith("/") or " " in path:
        check.fail("request.path", "must start with / and hold no spaces")
    check.text(req.get("query", ""), "request.query")
    check.headers(req.get("headers", {}), "request.headers")
    if req.get("family") not in (None, "anthropic", "openai"):
        check.fail("request.family", 'must be "anthropic", "openai" or absent')
    if req.get("body") is not None:
        check.body(req["body"], "request.body")


def _response(check: _Check, resp) -> None:
    check.object(resp, "response")
    status = resp.get("status")
    if type(status) is not int or not 100 <= status <= 599:
        check.fail("response.status", "must be an integer 100-599")
    check.headers(resp.get("headers", {}), "response.headers")
    chunks = resp.get("chunks")
    if chunks is None:
        if resp.get("body") is not None:
            check.body(resp["body"], "response.body")
        return
    if resp.get("body") is not None:
        check.fail("response.body", "must be null when the response has chunks")
    if not isinstance(chunks, list):
        check.fail("response.chunks", "must be null or a list")
    for i, chunk in enumerate(chunks):
        check.object(chunk, f"response.chunks[{i}]")
        check.number(chunk, "ms", f"response.chunks[{i}].")
        check.body(chunk.get("data"), f"response.chunks[{i}].data")


def _draws(check: _Check, draws) -> None:
    if not isinstance(draws, list):
        check.fail("draws", "must be a list")
    for i, draw in enumerate(draws):
        if not isinstance(draw, dict) or not isinstance(draw.get("fn"), str) or "v" not in draw:
            check.fail(f"draws[{i}]", 'must be {"fn": NAME, "v": VALUE}')
