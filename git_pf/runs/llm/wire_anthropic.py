"""Anthropic Messages (``POST /v1/messages``) on the wire: a request's ``system`` and
``messages``, a reply read from a ``message`` body or its event stream (``message_start``,
content blocks and their deltas, ``message_delta``, ``message_stop``), and a reply rendered
back as either. One of the codecs behind ``wire``.

Bodies are untrusted: a field of the wrong shape reads as absent. Pure functions.
"""
from __future__ import annotations

import json

from .wire_common import d, dicts, loads, n, pick, s, sse, text_of


def _block(b: dict) -> dict:
    kind = b.get("type")
    if kind == "text":
        return pick(b, "type", "text")
    if kind == "tool_use":
        return pick(b, "type", "id", "name", "input")
    return b


def _content(content):
    return content if isinstance(content, str) else [_block(b) for b in dicts(content)]


def request_messages(req: dict) -> list[dict]:
    out = []
    if isinstance(req.get("system"), (str, list)):
        out.append({"role": "system", "content": _content(req["system"])})
    return out + [{"role": m.get("role"), "content": _content(m.get("content"))} for m in dicts(req.get("messages"))]


def claims(obj: dict) -> bool:
    return obj.get("type") == "message"


def problem(obj: dict) -> str | None:
    blocks = obj.get("content")
    if not isinstance(blocks, list) or not all(isinstance(d(b).get("type"), str) for b in blocks):
        return "a message needs content, a list of blocks each with a type"
    return None


def reply_messages(full: dict) -> list[dict]:
    return [{"role": s(full.get("role"), "assistant"), "content": _content(full.get("content"))}]


def usage(full: dict) -> tuple[int, int, str]:
    u = d(full.get("usage"))
    return n(u.get("input_tokens")), n(u.get("output_tokens")), s(full.get("model"))


def reply_text(full: dict) -> str:
    return text_of([b for b in dicts(full.get("content")) if b.get("type") == "text"])


_DELTA_FIELD = {"text_delta": "text", "thinking_delta": "thinking", "signature_delta": "signature",
                "citations_delta": None}


def assemble(events: list[tuple[str, str]]) -> dict:
    """The ``message`` a stream adds up to."""
    full: dict = {"type": "message", "role": "assistant", "content": []}
    blocks: dict[int, dict] = {}
    partial: dict[int, str] = {}
    for _, data in events:
        event = d(loads(data))
        kind, index = event.get("type"), n(event.get("index"))
        if kind == "message_start":
            full.update(d(event.get("message")))
        elif kind == "content_block_start":
            blocks[index] = dict(d(event.get("content_block")))
        elif kind == "content_block_delta" and index in blocks:
            delta = d(event.get("delta"))
            if delta.get("type") == "input_json_delta":
                partial[index] = partial.get(index, "") + s(delta.get("partial_json"))
            elif _DELTA_FIELD.get(delta.get("type")):
                field = _DELTA_FIELD[delta["type"]]
                blocks[index][field] = s(blocks[index].get(field)) + s(delta.get(field))
        elif kind == "message_delta":
            full.update(pick(d(event.get("delta")), "stop_reason", "stop_sequence"))
            full["usage"] = {**d(full.get("usage")), **d(event.get("usage"))}
    for index, text in partial.items():
        value = loads(text) if text else {}
        blocks[index]["input"] = value if isinstance(value, dict) else {}
    full["content"] = [blocks[i] for i in sorted(blocks)]
    return full


def replace_text(full: dict | None, text: str, req: dict) -> dict:
    """``full`` (a new one when None) answering ``text``: its id, model and usage kept."""
    base = dict(full or {})
    for key, value in (("id", "msg_pf"), ("model", s(req.get("model"))),
                       ("usage", {"input_tokens": 0, "output_tokens": 0})):
        base.setdefault(key, value)
    base.update({"type": "message", "role": "assistant", "content": [{"type": "text", "text": text}],
                 "stop_reason": "end_turn", "stop_sequence": None})
    return base


def render(full: dict, req: dict) -> list[str]:
    """The event stream of ``full``: message_start, each block with its delta, message_delta,
    message_stop."""
    out = []

    def event(kind: str, **fields) -> None:
        out.append(sse({"type": kind, **fields}, kind))

    u = d(full.get("usage"))
    start = {**full, "content": [], "stop_reason": None, "stop_sequence": None,
             "usage": {**u, "input_tokens": n(u.get("input_tokens")), "output_tokens": 0}}
    event("message_start", message=start)
    for index, block in enumerate(dicts(full.get("content"))):
        kind = block.get("type")
        if kind == "text":
            event("content_block_start", index=index, content_block={**block, "text": ""})
            event("content_block_delta", index=index, delta={"type": "text_delta", "text": s(block.get("text"))})
        elif kind == "tool_use":
            event("content_block_start", index=index, content_block={**block, "input": {}})
            event("content_block_delta", index=index,
                  delta={"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))})
        else:
            event("content_block_start", index=index, content_block=block)
        event("content_block_stop", index=index)
    event("message_delta", delta=pick(full, "stop_reason", "stop_sequence") or {"stop_reason": "end_turn"},
          usage={"output_tokens": n(u.get("output_tokens"))})
    event("message_stop")
    return out
