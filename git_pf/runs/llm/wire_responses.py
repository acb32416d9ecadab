"""OpenAI Responses (``POST /v1/responses``) on the wire: a request's ``instructions`` and
``input`` as messages, a reply read from a ``response`` body or its event stream
(``response.created`` ... ``response.completed``), and a reply rendered back as either.
One of the codecs behind ``wire``.

Bodies are untrusted: a field of the wrong shape reads as absent. Pure functions.
"""
from __future__ import annotations

import copy

from .wire_common import d, dicts, loads, n, pick, s, sse, text_of

_FINAL = ("response.completed", "response.incomplete", "response.failed")


def _content(content):
    if isinstance(content, str):
        return content
    return [pick(p, "type", "text") if isinstance(p.get("text"), str) else p for p in dicts(content)]


def _message(item: dict) -> dict:
    """An input or output item as a trace message: role and content; a tool call or its output
    as the item itself under the assistant's or the tool's role."""
    if "role" in item:
        return {"role": item.get("role"), "content": _content(item.get("content"))}
    kind = item.get("type")
    if kind == "function_call":
        return {"role": "assistant", "content": [pick(item, "type", "call_id", "name", "arguments")]}
    if kind == "function_call_output":
        return {"role": "tool", "content": [pick(item, "type", "call_id", "output")]}
    return {"role": "assistant", "content": [item]}


def request_messages(req: dict) -> list[dict]:
    out = []
    if isinstance(req.get("instructions"), str):
        out.append({"role": "system", "content": req["instructions"]})
    items = req.get("input")
    if isinstance(items, str):
        return out + [{"role": "user", "content": items}]
    return out + [_message(item) for item in dicts(items)]


def claims(obj: dict) -> bool:
    return obj.get("object") == "response"


def problem(obj: dict) -> str | None:
    if not isinstance(obj.get("output"), list) or len(dicts(obj["output"])) != len(obj["output"]):
        return "a response needs output, a list of items"
    return None


def reply_messages(full: dict) -> list[dict]:
    return [_message(item) for item in dicts(full.get("output"))]


def usage(full: dict) -> tuple[int, int, str]:
    u = d(full.get("usage"))
    return n(u.get("input_tokens")), n(u.get("output_tokens")), s(full.get("model"))


def reply_text(full: dict) -> str:
    return "".join(text_of(item.get("content")) for item in dicts(full.get("output")) if item.get("type") == "message")


def assemble(events: list[tuple[str, str]]) -> dict:
    """The ``response`` a stream ends with (its final event's), else what its events add up to."""
    full: dict = {}
    items: dict[int, dict] = {}
    texts: dict[int, str] = {}
    for _, data in events:
        event = d(loads(data))
        kind = event.get("type")
        if isinstance(event.get("response"), dict):
            full = event["response"]
            if kind in _FINAL:
                return full
        elif kind == "response.output_item.done" and isinstance(event.get("item"), dict):
            items[n(event.get("output_index"))] = event["item"]
        elif kind == "response.output_text.delta":
            texts[n(event.get("output_index"))] = texts.get(n(event.get("output_index")), "") + s(event.get("delta"))
    for index, text in texts.items():
        items.setdefault(index, {"type": "message", "id": "", "status": "completed", "role": "assistant",
                                 "content": [{"type": "output_text", "text": text, "annotations": []}]})
    return {**full, "object": "response", "output": [items[i] for i in sorted(items)]}


def replace_text(full: dict | None, text: str, req: dict) -> dict:
    """``full`` (a new one when None) answering ``text``: its ids, model and usage kept."""
    base = dict(full or {})
    for key, value in (("id", "resp_pf"), ("created_at", 0), ("model", s(req.get("model"))),
                       ("parallel_tool_calls", True), ("tool_choice", "auto"), ("tools", [])):
        base.setdefault(key, value)
    first = next((i for i in dicts(base.get("output")) if i.get("type") == "message"), {})
    base.update({"object": "response", "status": "completed", "error": None, "incomplete_details": None,
                 "output": [{"type": "message", "id": s(first.get("id"), "msg_pf"), "status": "completed",
                             "role": "assistant",
                             "content": [{"type": "output_text", "text": text, "annotations": []}]}]})
    return base


def render(full: dict, req: dict) -> list[str]:
    """The event stream of ``full``: created, in progress, each item added, its text or
    arguments, done, and completed."""
    out = []

    def event(kind: str, **fields) -> None:
        out.append(sse({"type": kind, "sequence_number": len(out), **fields}, kind))

    start = {**copy.deepcopy(full), "status": "in_progress", "output": [], "usage": None}
    event("response.created", response=start)
    event("response.in_progress", response=start)
    for index, item in enumerate(dicts(full.get("output"))):
        item_id = s(item.get("id"))
        if item.get("type") == "message":
            event("response.output_item.added", output_index=index,
                  item={**item, "status": "in_progress", "content": []})
            for ci, part in enumerate(dicts(item.get("content"))):
                if part.get("type") != "output_text":
                    continue
                where = {"item_id": item_id, "output_index": index, "content_index": ci}
                event("response.content_part.added", **where, part={**part, "text": ""})
                event("response.output_text.delta", **where, delta=s(part.get("text")), logprobs=[])
                event("response.output_text.done", **where, text=s(part.get("text")), logprobs=[])
                event("response.content_part.done", **where, part=part)
        elif item.get("type") == "function_call":
            event("response.output_item.added", output_index=index, item={**item, "arguments": ""})
            where = {"item_id": item_id, "output_index": index}
            event("response.function_call_arguments.delta", **where, delta=s(item.get("arguments")))
            event("response.function_call_arguments.done", **where, arguments=s(item.get("arguments")))
        else:
            event("response.output_item.added", output_index=index, item=item)
        event("response.output_item.done", output_index=index, item=item)
    event("response.incomplete" if full.get("status") == "incomplete" else "response.completed", response=full)
    return out
