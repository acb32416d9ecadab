"""The trace layer: ``trace/messages.jsonl`` (chat and tool-call messages).

Messages are opaque JSON objects kept in order, one canonical object per
line. This module encodes, decodes and measures them (a token estimate used
by merge reports); it never reads the world or effects.
"""
from __future__ import annotations

from ...core import canonjson, jsonl
from ...core.errors import DataError

PATH = "trace/messages.jsonl"


def encode(messages: list[dict]) -> bytes:
    return canonjson.encode_lines(messages)


def decode(data: bytes) -> list[dict]:
    """The messages of an image's trace (image data: a malformed line is a ``DataError``)."""
    return jsonl.parse(data, PATH, DataError)


def estimate_tokens(messages: list[dict]) -> int:
    """A model-independent estimate: about four bytes of canonical JSON per token."""
    return (len(encode(messages)) + 3) // 4


def is_prefix(prefix: list[dict], messages: list[dict]) -> bool:
    return len(prefix) <= len(messages) and messages[: len(prefix)] == prefix
