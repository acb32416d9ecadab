"""Response bodies of the offline fake LLM server (``git_pf.testing.fakellm``), in the wire formats the real
SDKs parse: OpenAI chat.completions and responses, Anthropic messages, each as one JSON body or as SSE events.

Pure functions of (reply, request, ids): no sockets, no clocks, no randomness, so the same request and
reply always render to the same bytes. Only the fake server imports it; it touches nothing.
"""
from __future__ import annotations

import json

CREATED = 1_700_000_000  # a fixed clock: the fakes' bodies never depend on the time of day


def _words(text: str) -> list[str]:
    """Split text into pieces that concatenate back to it (the deltas of a stream)."""
    pieces, cur = [], ""
    for ch in text:
        cur += ch
        if ch == " " and len(cur) > 1:
            pieces.append(cur)
            cur = ""
    if cur:
        pieces.append(cur)
    return pieces or [""]


def _args_text(reply: dict) -> str:
    return json.dumps(reply["args"], sort_keys=True, separators=(",", ":"))


def _halves(s: str) -> list[str]:
    mid = len(s) // 2
    return [s[:mid], s[mid:]] if mid else [s]


def usage_counts(request_body: bytes, reply: dict) -> tuple[int, int]:
    out = len(_words(reply.get("text") or "")) + (len(_args_text(reply)) // 4 if reply.get("tool") else 0)
    return max(1, len(request_body) // 4), max(1, out)


def sse(event: str | None, data) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return (f"event: {event}\n" if event else "").encode() + f"data: {text}\n\n".encode()


# --- OpenAI chat.completions -------------------------------------------------------------------------

def chat_json(ids: dict, model: str, reply: dict, usage: tuple[int, int]) -> dict:
    msg = {"role": "assistant", "content": reply.get("text"), "refusal": None}
    if reply.get("tool"):
        msg["tool_calls"] = [{"id": ids["call"], "type": "function",
                              "function": {"name": reply["tool"], "arguments": _args_text(reply)}}]
    return {"id": ids["id"], "object": "chat.completion", "created": CREATED, "model": model,
            "system_fingerprint": "fp_fake",
            "choices": [{"index": 0, "message": msg, "logprobs": None,
                         "finish_reason": "tool_calls" if reply.get("tool") else "stop"}],
            "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}}


def chat_sse(ids: dict, model: str, reply: dict, usage: tuple[int, int], include_usage: bool) -> list[bytes]:
    def chunk(delta, finish=None, choices=True, **extra):
        body = {"id": ids["id"], "object": "chat.completion.chunk", "created": CREATED, "model": model,
                "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}] if choices else []}
        body.update(extra)
        return sse(None, body)

    out = [chunk({"role": "assistant", "content": "", "refusal": None})]
    if reply.get("text"):
        out += [chunk({"content": piece}) for piece in _words(reply["text"])]
    if reply.get("tool"):
        out.append(chunk({"tool_calls": [{"index": 0, "id": ids["call"], "type": "function",
                                          "function": {"name": reply["tool"], "arguments": ""}}]}))
        out += [chunk({"tool_calls": [{"index": 0, "function": {"arguments": part}}]})
                for part in _halves(_args_text(reply))]
    out.append(chunk({}, "tool_calls" if reply.get("tool") else "stop"))
    if include_usage:
        out.append(chunk(None, choices=False, usage={"prompt_tokens": usage[0], "completion_tokens": usage[1],
                                                     "total_tokens": sum(usage)}))
    out.append(sse(None, "[DONE]"))
    return out


# --- OpenAI responses ----------------------------------------------------------------------------------

def _resp_items(ids: dict, reply: dict) -> list[dict]:
    items = []
    if reply.get("text") or not reply.get("tool"):
        items.append({"type": "message", "id": ids["msg"], "status": "completed", "role": "assistant",
                      "content": [{"type": "output_text", "text": reply.get("text") or "", "annotations": [], "logprobs": []}]})
    if reply.get("tool"):
        items.append({"type": "function_call", "id": ids["fc"], "call_id": ids["call"], "name": reply["tool"],
                      "arguments": _args_text(reply), "status": "completed"})
    return items


def responses_json(ids: dict, model: str, reply: dict, usage: tuple[int, int], request: dict,
                   status: str = "completed") -> dict:
    done = status == "completed"
    return {"id": ids["id"], "object": "response", "created_at": CREATED, "status": status, "error": None,
            "incomplete_details": None, "instructions": request.get("instructions"), "model": model,
            "output": _resp_items(ids, reply) if done else [], "parallel_tool_calls": True,
            "temperature": 1.0, "tool_choice": "auto", "tools": request.get("tools") or [], "top_p": 1.0,
            "metadata": {}, "text": {"format": {"type": "text"}}, "truncation": "disabled",
            "usage": ({"input_tokens": usage[0], "input_tokens_details": {"cached_tokens": 0},
                       "output_tokens": usage[1], "output_tokens_details": {"reasoning_tokens": 0},
                       "total_tokens": sum(usage)} if done else None)}


def responses_sse(ids: dict, model: str, reply: dict, usage: tuple[int, int], request: dict) -> list[bytes]:
    events: list[tuple[str, dict]] = []
    events.append(("response.created", {"response": responses_json(ids, model, reply, usage, request, "in_progress")}))
    events.append(("response.in_progress", {"response": responses_json(ids, model, reply, usage, request, "in_progress")}))
    for index, item in enumerate(_resp_items(ids, reply)):
        if item["type"] == "message":
            text = item["content"][0]["text"]
            events.append(("response.output_item.added", {"output_index": index, "item": dict(
                item, status="in_progress", content=[])}))
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            where = {"item_id": item["id"], "output_index": index, "content_index": 0}
            events.append(("response.content_part.added", dict(where, part=part)))
            events += [("response.output_text.delta", dict(where, delta=p, logprobs=[])) for p in _words(text)]
            events.append(("response.output_text.done", dict(where, text=text, logprobs=[])))
            events.append(("response.content_part.done", dict(where, part=dict(part, text=text))))
        else:
            events.append(("response.output_item.added", {"output_index": index, "item": dict(
                item, status="in_progress", arguments="")}))
            where = {"item_id": item["id"], "output_index": index}
            events += [("response.function_call_arguments.delta", dict(where, delta=p))
                       for p in _halves(item["arguments"])]
            events.append(("response.function_call_arguments.done", dict(
                where, arguments=item["arguments"], name=item["name"])))
        events.append(("response.output_item.done", {"output_index": index, "item": item}))
    events.append(("response.completed", {"response": responses_json(ids, model, reply, usage, request)}))
    return [sse(name, dict({"type": name, "sequence_number": n}, **data)) for n, (name, data) in enumerate(events)]


# --- Anthropic messages --------------------------------------------------------------------------------

def _blocks(ids: dict, reply: dict) -> list[dict]:
    blocks = []
    if reply.get("text") or not reply.get("tool"):
        blocks.append({"type": "text", "text": reply.get("text") or ""})
    if reply.get("tool"):
        blocks.append({"type": "tool_use", "id": ids["call"], "name": reply["tool"], "input": reply["args"]})
    return blocks


def anthropic_json(ids: dict, model: str, reply: dict, usage: tuple[int, int]) -> dict:
    return {"id": ids["id"], "type": "message", "role": "assistant", "model": model,
            "content": _blocks(ids, reply), "stop_reason": "tool_use" if reply.get("tool") else "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": usage[0], "output_tokens": usage[1]}}


def anthropic_sse(ids: dict, model: str, reply: dict, usage: tuple[int, int]) -> list[bytes]:
    start = dict(anthropic_json(ids, model, reply, usage), content=[], stop_reason=None,
                 usage={"input_tokens": usage[0], "output_tokens": 1})
    events: list[tuple[str, dict]] = [("message_start", {"message": start})]
    for index, block in enumerate(_blocks(ids, reply)):
        if block["type"] == "text":
            events.append(("content_block_start", {"index": index, "content_block": {"type": "text", "text": ""}}))
            if index == 0:
                events.append(("ping", {}))
            events += [("content_block_delta", {"index": index, "delta": {"type": "text_delta", "text": p}})
                       for p in _words(block["text"])]
        else:
            events.append(("content_block_start", {"index": index, "content_block": dict(block, input={})}))
            events += [("content_block_delta", {"index": index, "delta": {"type": "input_json_delta",
                                                                          "partial_json": p}})
                       for p in _halves(_args_text(reply))]
        events.append(("content_block_stop", {"index": index}))
    events.append(("message_delta", {"delta": {"stop_reason": "tool_use" if reply.get("tool") else "end_turn",
                                               "stop_sequence": None}, "usage": {"output_tokens": usage[1]}}))
    events.append(("message_stop", {}))
    return [sse(name, dict({"type": name}, **data)) for name, data in events]
