"""What the LLM wire formats share: server-sent events (parse and render) and reading JSON of
untrusted shape (a value of the wrong type reads as empty, never raises).

Used by the per-API modules (``wire_chat``, ``wire_responses``, ``wire_anthropic``) behind
``wire``. Pure functions: no HTTP, no git.
"""
from __future__ import annotations

import json

from ...core import canonjson


def parse_sse(text: str) -> list[tuple[str, str]]:
    """The events of an event stream as ``(event name or "", data)``, data lines joined by
    newlines; comments and events without data are skipped."""
    out = []
    for block in text.replace("\r\n", "\n").replace("\r", "\n").split("\n\n"):
        event, data = "", []
        for line in block.split("\n"):
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "event":
                event = value
            elif name == "data":
                data.append(value)
        if data:
            out.append((event, "\n".join(data)))
    return out


def sse(data, event: str | None = None) -> str:
    """One event as an API sends it: ``event: NAME`` (when named) and one ``data:`` line."""
    line = "data: " + (data if isinstance(data, str) else canonjson.dumps(data)) + "\n\n"
    return f"event: {event}\n{line}" if event else line


def loads(text: str):
    """A JSON value, or None when ``text`` is not JSON."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def d(value) -> dict:
    return value if isinstance(value, dict) else {}


def lst(value) -> list:
    return value if isinstance(value, list) else []


def s(value, default: str = "") -> str:
    return value if isinstance(value, str) else default


def n(value) -> int:
    return value if type(value) is int else 0


def dicts(value) -> list[dict]:
    """The objects of a list (anything else in it dropped)."""
    return [v for v in lst(value) if isinstance(v, dict)]


def pick(obj: dict, *keys: str) -> dict:
    """``obj``'s values under ``keys`` (those present and not None)."""
    return {k: obj[k] for k in keys if obj.get(k) is not None}


def text_of(content) -> str:
    """The text of message content: a string, or the ``text`` of its parts."""
    if isinstance(content, str):
        return content
    return "".join(s(part.get("text")) for part in dicts(content))
