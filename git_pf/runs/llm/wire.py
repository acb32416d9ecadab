"""The LLM APIs a tape entry speaks: which one an exchange is, the trace messages after it,
its token usage and reply text, and the entry with a changed reply (docs/record.md).

Knows OpenAI Chat Completions (``wire_chat``), OpenAI Responses (``wire_responses``) and
Anthropic Messages (``wire_anthropic``), each as a JSON body or a server-sent event stream.
A reply is read from the JSON body, or assembled from the stream's chunks; a changed reply is
rendered the way that API sends it, streamed when the original was. Entries come from images:
anything malformed reads as absent. Pure data: no HTTP, no git.
"""
from __future__ import annotations

import copy

from ...core import canonjson
from ...core.errors import DataError, InputFormatError, UsageError
from ...layers.trace import exchange
from . import wire_anthropic, wire_chat, wire_responses
from .wire_common import d, loads, parse_sse, s

CODECS = {"openai.chat": wire_chat, "openai.responses": wire_responses, "anthropic.messages": wire_anthropic}
_ROUTES = (("/chat/completions", "openai.chat"), ("/responses", "openai.responses"), ("/messages", "anthropic.messages"))
_STALE = ("retry-after", "retry-after-ms", "x-should-retry", "content-type")  # not true of a changed 200 reply


def api_of(method: str, path: str) -> str:
    """``openai.chat``, ``openai.responses``, ``anthropic.messages`` (a POST to a path ending in
    the API's endpoint, any prefix before it) or ``other``."""
    path = path.split("?", 1)[0].rstrip("/")
    if method.upper() == "POST":
        for suffix, api in _ROUTES:
            if path.endswith(suffix):
                return api
    return "other"


def _codec(entry: dict):
    return CODECS.get(entry.get("api")) if isinstance(entry, dict) else None


def _bytes(b) -> bytes:
    try:
        return exchange.body_bytes(b) if isinstance(b, dict) or b is None else b""
    except DataError:
        return b""


def _request(entry: dict) -> dict:
    return d(loads(_bytes(d(entry.get("request")).get("body")).decode("utf-8", "replace")))


def _streamed(entry: dict, req: dict) -> bool:
    return req.get("stream") is True or d(entry.get("response")).get("chunks") is not None


def _full(entry: dict, codec) -> dict | None:
    """The response body of a successful exchange as one JSON object (assembled from a stream)."""
    resp = d(entry.get("response"))
    if not 200 <= (resp.get("status") if type(resp.get("status")) is int else 0) < 300:
        return None
    if isinstance(resp.get("chunks"), list):
        text = b"".join(_bytes(d(c).get("data")) for c in resp["chunks"]).decode("utf-8", "replace")
        return codec.assemble(parse_sse(text))
    text = _bytes(resp.get("body")).decode("utf-8", "replace")
    body = loads(text)
    if isinstance(body, dict):
        return body
    return codec.assemble(parse_sse(text)) if "data:" in text else None  # a stream kept whole


def messages(entry: dict) -> list[dict]:
    """The trace after this exchange: the request's messages, then the assistant's reply
    (none when the exchange failed). ``[]`` for an API git-pf does not know."""
    codec = _codec(entry)
    if codec is None:
        return []
    full = _full(entry, codec)
    return codec.request_messages(_request(entry)) + (codec.reply_messages(full) if full else [])


def usage(entry: dict) -> dict:
    """``{"input_tokens", "output_tokens", "model"}`` of the reply (zeros and "" when absent)."""
    codec = _codec(entry)
    full = _full(entry, codec) if codec else None
    tin, tout, model = codec.usage(full) if full else (0, 0, "")
    return {"input_tokens": tin, "output_tokens": tout, "model": model or s(_request(entry).get("model"))}


def reply_text(entry: dict) -> str:
    """The assistant's text reply ("" when there is none)."""
    codec = _codec(entry)
    full = _full(entry, codec) if codec else None
    return codec.reply_text(full) if full else ""


def _known(entry: dict):
    codec = _codec(entry)
    if codec is None:
        raise UsageError(f"step {entry.get('step')}: its exchange is not a call of an LLM API git-pf knows "
                         "(OpenAI chat.completions or responses, Anthropic messages)")
    return codec


def with_reply(entry: dict, text: str) -> dict:
    """A copy of ``entry`` whose response says ``text``: status 200, the same API, streamed when
    the original was; a JSON body keeps its ids, model and usage."""
    codec = _known(entry)
    req = _request(entry)
    return _answer(entry, codec.replace_text(_full(entry, codec), text, req), codec, req)


def _answer(entry: dict, full: dict, codec, req: dict) -> dict:
    out = copy.deepcopy(entry)
    resp = d(out.get("response"))
    headers = {k: v for k, v in d(resp.get("headers")).items() if k not in _STALE}
    if _streamed(entry, req):
        headers["content-type"] = "text/event-stream; charset=utf-8"
        chunks = [{"ms": 0, "data": exchange.body(piece.encode("utf-8"))} for piece in codec.render(full, req)]
        out["response"] = {"status": 200, "headers": headers, "body": None, "chunks": chunks}
    else:
        headers["content-type"] = "application/json"
        out["response"] = {"status": 200, "headers": headers, "body": exchange.body(canonjson.dumps(full).encode()),
                           "chunks": None}
    return out


def response_from_file(entry: dict, data: bytes) -> dict:
    """``entry`` answered by a user's file: a full response body of the entry's API (rendered as a
    stream when the entry was streamed), or else the reply's text (one trailing newline
    dropped). Malformed: an ``InputFormatError``."""
    codec = _known(entry)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise InputFormatError("the file is neither UTF-8 text nor a JSON response body", param="response") from None
    obj = loads(text) if text.lstrip().startswith("{") else None
    if isinstance(obj, dict):
        for api, other in CODECS.items():
            if other.claims(obj) and other is not codec:
                raise InputFormatError(f"the file holds a {api} response, but step {entry.get('step')} is an "
                                       f"{entry.get('api')} exchange", param="response")
        if codec.claims(obj):
            problem = codec.problem(obj)
            if problem:
                raise InputFormatError(f"the file's response body is malformed: {problem}", param="response")
            req = _request(entry)
            answered = _answer(entry, obj, codec, req)
            if not _streamed(entry, req):
                answered["response"]["body"] = exchange.body(data)  # the body exactly as given
            return answered
    return with_reply(entry, text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text)
