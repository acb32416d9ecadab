"""OpenAI Chat Completions (``POST /v1/chat/completions``) on the wire: a request's messages,
a reply assembled from a ``chat.completion`` body or from its ``chat.completion.chunk``
stream, and a reply rendered back as either. One of the codecs behind ``wire``.

Bodies are untrusted: a field of the wrong shape reads as absent. Pure functions.
"""
from __future__ import annotations

from .wire_common import d, dicts, loads, n, pick, s, sse, text_of


def _tool_calls(calls) -> list[dict]:
    return [{"id": s(c.get("id")), "type": s(c.get("type"), "function"),
             "function": pick(d(c.get("function")), "name", "arguments")} for c in dicts(calls)]


def _message(m: dict) -> dict:
    """A chat message as the trace keeps it: role, content, and tool calls, their ids, a name."""
    out = {"role": m.get("role"), "content": m.get("content")}
    if m.get("tool_calls"):
        out["tool_calls"] = _tool_calls(m["tool_calls"])
    out.update(pick(m, "tool_call_id", "name"))
    return out


def request_messages(req: dict) -> list[dict]:
    return [_message(m) for m in dicts(req.get("messages"))]


def claims(obj: dict) -> bool:
    return obj.get("object") == "chat.completion"


def problem(obj: dict) -> str | None:
    if not dicts(obj.get("choices")) or not all(isinstance(c.get("message"), dict) for c in dicts(obj["choices"])):
        return "a chat.completion needs choices, each with a message"
    return None


def _choice(full: dict) -> dict:
    choices = dicts(full.get("choices"))
    return d(choices[0].get("message")) if choices else {}


def reply_messages(full: dict) -> list[dict]:
    message = _choice(full)
    return [_message({**message, "role": message.get("role") or "assistant"})] if message else []


def usage(full: dict) -> tuple[int, int, str]:
    u = d(full.get("usage"))
    return n(u.get("prompt_tokens")), n(u.get("completion_tokens")), s(full.get("model"))


def reply_text(full: dict) -> str:
    return text_of(_choice(full).get("content"))


_HEAD = ("id", "created", "model", "system_fingerprint", "service_tier")


def assemble(events: list[tuple[str, str]]) -> dict:
    """The ``chat.completion`` a chunk stream adds up to."""
    full: dict = {"object": "chat.completion", "choices": []}
    choices: dict[int, dict] = {}
    for _, data in events:
        chunk = d(loads(data)) if data != "[DONE]" else {}
        for key in _HEAD:
            if key not in full and chunk.get(key) is not None:
                full[key] = chunk[key]
        if isinstance(chunk.get("usage"), dict):
            full["usage"] = chunk["usage"]
        for c in dicts(chunk.get("choices")):
            choice = choices.setdefault(n(c.get("index")), {"index": n(c.get("index")),
                                                            "message": {"role": "assistant", "content": None},
                                                            "finish_reason": None})
            _add_delta(choice["message"], d(c.get("delta")))
            if c.get("finish_reason") is not None:
                choice["finish_reason"] = c["finish_reason"]
    for choice in choices.values():
        message = choice["message"]
        if message["content"] is not None:
            message["content"] = "".join(message["content"])
    full["choices"] = [choices[i] for i in sorted(choices)]
    return full


def _add_delta(message: dict, delta: dict) -> None:
    if isinstance(delta.get("role"), str):
        message["role"] = delta["role"]
    if isinstance(delta.get("content"), str):  # a list of pieces until assemble joins them
        if message["content"] is None:
            message["content"] = []
        message["content"].append(delta["content"])
    for call in dicts(delta.get("tool_calls")):
        calls = message.setdefault("tool_calls", [])
        index = n(call.get("index"))
        while len(calls) <= index:
            calls.append({"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
        if isinstance(call.get("id"), str):
            calls[index]["id"] = call["id"]
        fn = d(call.get("function"))
        for key in ("name", "arguments"):
            calls[index]["function"][key] += s(fn.get(key))


def replace_text(full: dict | None, text: str, req: dict) -> dict:
    """``full`` (a new one when None) answering ``text``: its ids, model and usage kept."""
    base = dict(full or {})
    base.setdefault("id", "chatcmpl-pf")
    base.setdefault("created", 0)
    base.setdefault("model", s(req.get("model")))
    base["object"] = "chat.completion"
    base["choices"] = [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                        "finish_reason": "stop", "logprobs": None}]
    return base


def render(full: dict, req: dict) -> list[str]:
    """The chunk stream of ``full``, with a usage chunk when the request asked for one."""
    head = {"id": s(full.get("id"), "chatcmpl-pf"), "object": "chat.completion.chunk",
            "created": n(full.get("created")), "model": s(full.get("model")),
            **pick(full, "system_fingerprint", "service_tier")}
    out = []

    def chunk(index: int, delta: dict, finish=None) -> None:
        choice = {"index": index, "delta": delta, "finish_reason": finish, "logprobs": None}
        out.append(sse({**head, "choices": [choice]}))

    for c in dicts(full.get("choices")):
        index, message = n(c.get("index")), d(c.get("message"))
        chunk(index, {"role": "assistant", "content": ""})
        if isinstance(message.get("content"), str) and message["content"]:
            chunk(index, {"content": message["content"]})
        calls = _tool_calls(message.get("tool_calls"))
        if calls:
            chunk(index, {"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
        chunk(index, {}, s(c.get("finish_reason"), "tool_calls" if calls else "stop"))
    if d(req.get("stream_options")).get("include_usage") and isinstance(full.get("usage"), dict):
        out.append(sse({**head, "choices": [], "usage": full["usage"]}))
    out.append(sse("[DONE]"))
    return out

