"""The LLM wire formats of a tape entry (git_pf.runs.llm.wire): the bodies here are built as
OpenAI chat.completions, OpenAI responses and Anthropic messages send them (JSON, and SSE cut
into chunks at odd places), and what ``with_reply`` / ``response_from_file`` render is read
back by the real SDKs' own stream parsers, strict model validation and stream accumulators."""
from __future__ import annotations

import json

import anthropic
import httpx2
import openai
import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message, RawMessageStreamEvent
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent

from git_pf.core.errors import InputFormatError, UsageError
from git_pf.layers.trace import exchange
from git_pf.runs.llm import wire


def sse(events: list[dict], named: bool) -> str:
    """A stream as the API writes it: ``event:`` lines for responses and anthropic, ``data:`` only for chat."""
    out = "".join((f"event: {e['type']}\n" if named else "") + "data: " + json.dumps(e, separators=(",", ":")) + "\n\n"
                  for e in events)
    return out if named else out + "data: [DONE]\n\n"


def entry(api: str, request: dict, response, status: int = 200, streamed: bool = False, step: int = 1) -> dict:
    path = {"openai.chat": "/v1/chat/completions", "openai.responses": "/v1/responses",
            "anthropic.messages": "/v1/messages"}[api]
    resp = {"status": status, "headers": {"content-type": "application/json", "x-request-id": "req_7"},
            "body": None, "chunks": None}
    if streamed:
        text = response.encode()
        cuts = [0, 7, 61, 62, 200, len(text) // 2, len(text) - 3, len(text)]  # pieces split mid-event and mid-UTF-8
        cuts = sorted({min(c, len(text)) for c in cuts})
        pieces = [text[a:b] for a, b in zip(cuts, cuts[1:])]
        resp.update(headers={"content-type": "text/event-stream"},
                    chunks=[{"ms": 1.5, "data": exchange.body(p)} for p in pieces])
    else:
        resp["body"] = exchange.body(json.dumps(response).encode())
    return {"v": 2, "kind": "exchange", "step": step, "arrival": step, "batch": step, "api": api,
            "request": {"method": "POST", "path": path, "query": "", "headers": {},
                        "body": exchange.body(json.dumps(request).encode())},
            "response": resp, "draws": [], "ms": 10}


# -- the payloads, as each API sends them ------------------------------------------------------

CHAT_REQ = {"model": "gpt-4o-mini", "messages": [
    {"role": "system", "content": "You edit files."}, {"role": "user", "content": "Read a.txt"},
    {"role": "assistant", "content": None, "refusal": None,
     "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":\"a.txt\"}"}}]},
    {"role": "tool", "tool_call_id": "call_1", "content": "héllo ☃"}]}
CHAT_JSON = {"id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion", "created": 1741569952,
             "model": "gpt-4o-2024-08-06", "choices": [{"index": 0, "message": {
                 "role": "assistant", "content": "It says héllo ☃.", "refusal": None, "annotations": []},
                 "logprobs": None, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 19, "completion_tokens": 10, "total_tokens": 29,
                       "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                       "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                     "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
             "service_tier": "default", "system_fingerprint": "fp_fc9f1d7035"}


def chat_chunk(delta: dict, finish=None, **extra) -> dict:
    return {"id": "chatcmpl-7", "object": "chat.completion.chunk", "created": 1741569952, "model": "gpt-4o-mini",
            "system_fingerprint": "fp_1", "choices": [{"index": 0, "delta": delta, "logprobs": None,
                                                      "finish_reason": finish}], **extra}


CHAT_SSE_TOOL = sse([
    chat_chunk({"role": "assistant", "content": None, "refusal": None, "tool_calls": [
        {"index": 0, "id": "call_9", "type": "function", "function": {"name": "write", "arguments": ""}}]}),
    chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "{\"p\": \"b.t"}}]}),
    chat_chunk({"tool_calls": [{"index": 0, "function": {"arguments": "xt\"}"}}]}),
    chat_chunk({}, "tool_calls"),
    {**chat_chunk({}), "choices": [], "usage": {"prompt_tokens": 31, "completion_tokens": 12, "total_tokens": 43}},
], named=False)
CHAT_SSE_TEXT = sse([chat_chunk({"role": "assistant", "content": "", "refusal": None}),
                     chat_chunk({"content": "Done: wr"}), chat_chunk({"content": "ote b.txt ☃"}),
                     chat_chunk({}, "stop")], named=False)

RESP_REQ = {"model": "gpt-4.1", "instructions": "Be brief.", "input": [
    {"role": "user", "content": "Read a.txt"},
    {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "read", "arguments": "{}", "status": "completed"},
    {"type": "function_call_output", "call_id": "call_1", "output": "hello"}], "stream": True}
RESP_BODY = {"id": "resp_67ccd2bed1ec8190", "object": "response", "created_at": 1741476542, "status": "completed",
             "error": None, "incomplete_details": None, "instructions": "Be brief.", "max_output_tokens": None,
             "model": "gpt-4.1-2025-04-14", "output": [{
                 "type": "message", "id": "msg_67ccd2bf17f0819081ff", "status": "completed", "role": "assistant",
                 "content": [{"type": "output_text", "text": "It says hello.", "annotations": []}]}],
             "parallel_tool_calls": True, "previous_response_id": None, "reasoning": {"effort": None, "summary": None},
             "store": True, "temperature": 1.0, "text": {"format": {"type": "text"}}, "tool_choice": "auto", "tools": [],
             "top_p": 1.0, "truncation": "disabled",
             "usage": {"input_tokens": 36, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                       "output_tokens": 87,
                       "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 123},
             "user": None, "metadata": {}}


def resp_stream(body: dict) -> str:
    item, part = body["output"][0], body["output"][0]["content"][0]
    start = {**body, "status": "in_progress", "output": [], "usage": None}
    where = {"item_id": item["id"], "output_index": 0, "content_index": 0}
    events = [{"type": "response.created", "response": start}, {"type": "response.in_progress", "response": start},
              {"type": "response.output_item.added", "output_index": 0, "item": {**item, "status": "in_progress", "content": []}},
              {"type": "response.content_part.added", **where, "part": {**part, "text": ""}},
              {"type": "response.output_text.delta", **where, "delta": part["text"][:5], "logprobs": []},
              {"type": "response.output_text.delta", **where, "delta": part["text"][5:], "logprobs": []},
              {"type": "response.output_text.done", **where, "text": part["text"], "logprobs": []},
              {"type": "response.content_part.done", **where, "part": part},
              {"type": "response.output_item.done", "output_index": 0, "item": item},
              {"type": "response.completed", "response": body}]
    return sse([{**e, "sequence_number": i} for i, e in enumerate(events)], named=True)


ANT_REQ = {"model": "claude-sonnet-4-5", "max_tokens": 1024, "system": "You edit files.", "messages": [
    {"role": "user", "content": "Read a.txt"},
    {"role": "assistant", "content": [{"type": "text", "text": "Reading.", "citations": None},
                                      {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": "a.txt"}}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "hello"}]}]}
ANT_JSON = {"id": "msg_013Zva2CMHLNnXjNJJKqJ2EF", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5-20250929", "content": [{"type": "text", "text": "It says hello."}],
            "stop_reason": "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 2095, "output_tokens": 503, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "service_tier": "standard"}}
ANT_SSE = sse([
    {"type": "message_start", "message": {"id": "msg_1nZd", "type": "message", "role": "assistant", "content": [],
                                          "model": "claude-sonnet-4-5-20250929", "stop_reason": None,
                                          "stop_sequence": None, "usage": {"input_tokens": 25, "output_tokens": 1}}},
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "ping"},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "I will wr"}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ite ☃."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "toolu_2", "name": "write",
                                                                  "input": {}}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": ""}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"p\": \"b."}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "txt\"}"}},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None}, "usage": {"output_tokens": 15}},
    {"type": "message_stop"}], named=True)


# -- reading ------------------------------------------------------------------------------------

@pytest.mark.parametrize("method,path,api", [
    ("POST", "/v1/chat/completions", "openai.chat"), ("post", "/openai/deployments/x/chat/completions?v=1", "openai.chat"),
    ("POST", "/v1/responses", "openai.responses"), ("POST", "/v1/messages", "anthropic.messages"),
    ("GET", "/v1/responses", "other"), ("POST", "/v1/messages/count_tokens", "other"), ("POST", "/v1/embeddings", "other")])
def test_api_of(method, path, api):
    assert wire.api_of(method, path) == api


def test_chat_json_messages_usage_and_text():
    e = entry("openai.chat", CHAT_REQ, CHAT_JSON)
    msgs = wire.messages(e)
    assert msgs[:2] == [{"role": "system", "content": "You edit files."}, {"role": "user", "content": "Read a.txt"}]
    assert msgs[2] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"p\":\"a.txt\"}"}}]}
    assert msgs[3] == {"role": "tool", "content": "héllo ☃", "tool_call_id": "call_1"}
    assert msgs[4] == {"role": "assistant", "content": "It says héllo ☃."} and len(msgs) == 5
    assert wire.usage(e) == {"input_tokens": 19, "output_tokens": 10, "model": "gpt-4o-2024-08-06"}
    assert wire.reply_text(e) == "It says héllo ☃."


def test_chat_stream_of_a_tool_call_is_assembled_across_chunk_boundaries():
    e = entry("openai.chat", {**CHAT_REQ, "stream": True}, CHAT_SSE_TOOL, streamed=True)
    assert len(e["response"]["chunks"]) > 5
    assert wire.messages(e)[-1] == {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "write", "arguments": "{\"p\": \"b.txt\"}"}}]}
    assert wire.usage(e) == {"input_tokens": 31, "output_tokens": 12, "model": "gpt-4o-mini"}
    assert wire.reply_text(e) == ""
    text = entry("openai.chat", {**CHAT_REQ, "stream": True}, CHAT_SSE_TEXT, streamed=True)
    assert wire.reply_text(text) == "Done: wrote b.txt ☃"
    assert wire.usage(text) == {"input_tokens": 0, "output_tokens": 0, "model": "gpt-4o-mini"}


def test_responses_messages_from_json_and_from_the_stream_agree():
    js, st = entry("openai.responses", RESP_REQ, RESP_BODY), entry("openai.responses", RESP_REQ, resp_stream(RESP_BODY),
                                                                     streamed=True)
    assert wire.messages(js) == wire.messages(st) == [
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "Read a.txt"},
        {"role": "assistant", "content": [{"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"}]},
        {"role": "tool", "content": [{"type": "function_call_output", "call_id": "call_1", "output": "hello"}]},
        {"role": "assistant", "content": [{"type": "output_text", "text": "It says hello."}]}]
    assert wire.usage(js) == wire.usage(st) == {"input_tokens": 36, "output_tokens": 87, "model": "gpt-4.1-2025-04-14"}
    assert wire.reply_text(st) == "It says hello."
    # the reply as the agent sends it back next turn (the SDK's own dump) is the same trace message
    echoed = Response.model_validate(RESP_BODY).output[0].model_dump(exclude_none=True)
    nxt = entry("openai.responses", {"model": "gpt-4.1", "input": [echoed]}, RESP_BODY)
    assert wire.messages(nxt)[0] == wire.messages(js)[-1]


def test_anthropic_messages_from_json_and_stream():
    js = entry("anthropic.messages", ANT_REQ, ANT_JSON)
    msgs = wire.messages(js)
    assert msgs[0] == {"role": "system", "content": "You edit files."}
    assert msgs[2] == {"role": "assistant", "content": [{"type": "text", "text": "Reading."}, {
        "type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": "a.txt"}}]}
    assert msgs[-1] == {"role": "assistant", "content": [{"type": "text", "text": "It says hello."}]}
    assert wire.usage(js) == {"input_tokens": 2095, "output_tokens": 503, "model": "claude-sonnet-4-5-20250929"}
    st = entry("anthropic.messages", {**ANT_REQ, "stream": True}, ANT_SSE, streamed=True)
    assert wire.messages(st)[-1] == {"role": "assistant", "content": [
        {"type": "text", "text": "I will write ☃."}, {"type": "tool_use", "id": "toolu_2", "name": "write",
                                                     "input": {"p": "b.txt"}}]}
    assert wire.usage(st) == {"input_tokens": 25, "output_tokens": 15, "model": "claude-sonnet-4-5-20250929"}
    assert wire.reply_text(st) == "I will write ☃."


def test_a_failed_or_unknown_or_garbled_exchange_reads_as_no_reply():
    limited = entry("openai.chat", CHAT_REQ, {"error": {"message": "Rate limit", "type": "requests"}}, status=429)
    assert wire.messages(limited) == wire.messages(entry("openai.chat", CHAT_REQ, CHAT_JSON))[:-1]
    assert wire.usage(limited) == {"input_tokens": 0, "output_tokens": 0, "model": "gpt-4o-mini"}
    other = {**limited, "api": "other"}
    assert wire.messages(other) == [] and wire.reply_text(other) == ""
    for junk in ([1, 2], {"choices": "x", "usage": [1]}, {"choices": [{"message": {"content": 5}}]}):
        e = entry("openai.chat", {"messages": "x"}, junk)
        assert wire.messages(e) in ([], [{"role": "assistant", "content": 5}]) and wire.reply_text(e) == ""
    garbled = entry("anthropic.messages", ANT_REQ, "data: {not json\n\nevent: x\ndata: [1]\n\n", streamed=True)
    garbled["response"]["chunks"].append({"ms": 0, "data": {"b64": "//79"}})
    assert wire.reply_text(garbled) == "" and wire.usage(garbled)["output_tokens"] == 0


# -- a changed reply, read back by the real SDKs ------------------------------------------------

def openai_stream(e: dict, cast_to):
    client = openai.OpenAI(api_key="sk-test", base_url="http://127.0.0.1:9/v1", _strict_response_validation=True)
    body = exchange.response_bytes(e["response"])
    response = httpx2.Response(e["response"]["status"], headers=e["response"]["headers"], content=body,
                               request=httpx2.Request("POST", "http://127.0.0.1:9/v1/x"))
    return list(openai.Stream(cast_to=cast_to, response=response, client=client))


def anthropic_stream(e: dict):
    client = anthropic.Anthropic(api_key="sk-ant-test", base_url="http://127.0.0.1:9", _strict_response_validation=True)
    body = exchange.response_bytes(e["response"])
    response = httpx2.Response(200, headers=e["response"]["headers"], content=body,
                               request=httpx2.Request("POST", "http://127.0.0.1:9/v1/messages"))
    return list(anthropic.Stream(cast_to=RawMessageStreamEvent, response=response, client=client))


def accumulate_anthropic(events) -> Message:
    snapshot, bufs = None, {}
    for ev in events:
        snapshot = accumulate_event(event=ev, current_snapshot=snapshot, json_bufs=bufs)
    return snapshot


def body_json(e: dict) -> dict:
    return json.loads(exchange.body_bytes(e["response"]["body"]))


NEW = "Now I say ☃ \"quoted\"\nand a second line."


def test_chat_with_reply_json_keeps_ids_and_usage_and_validates():
    e = wire.with_reply(entry("openai.chat", CHAT_REQ, CHAT_JSON, step=3), NEW)
    assert e["step"] == 3 and e["request"] == entry("openai.chat", CHAT_REQ, CHAT_JSON)["request"]
    parsed = ChatCompletion.model_validate(body_json(e))
    assert parsed.choices[0].message.content == NEW and parsed.choices[0].finish_reason == "stop"
    assert parsed.id == CHAT_JSON["id"] and parsed.usage.total_tokens == 29 and parsed.model == CHAT_JSON["model"]
    assert e["response"]["headers"] == {"content-type": "application/json", "x-request-id": "req_7"}
    assert wire.reply_text(e) == NEW


@pytest.mark.parametrize("recorded", [CHAT_SSE_TOOL, CHAT_SSE_TEXT])
def test_chat_with_reply_stream_is_read_by_the_sdk(recorded):
    req = {**CHAT_REQ, "stream": True, "stream_options": {"include_usage": True}}
    e = wire.with_reply(entry("openai.chat", req, recorded, streamed=True), NEW)
    assert e["response"]["body"] is None and all(c["ms"] == 0 for c in e["response"]["chunks"])
    chunks = openai_stream(e, ChatCompletionChunk)
    state = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    final = state.get_final_completion()
    assert final.choices[0].message.content == NEW and final.choices[0].message.tool_calls in (None, [])
    assert final.id == "chatcmpl-7" and final.choices[0].finish_reason == "stop"
    assert (final.usage is not None) == (recorded is CHAT_SSE_TOOL)  # usage kept when it was streamed
    assert wire.reply_text(e) == NEW


def test_responses_with_reply_json_and_stream_are_read_by_the_sdk():
    js = wire.with_reply(entry("openai.responses", {**RESP_REQ, "stream": False}, RESP_BODY), NEW)
    parsed = Response.model_validate(body_json(js))
    assert parsed.output_text == NEW and parsed.id == RESP_BODY["id"] and parsed.usage.total_tokens == 123
    st = wire.with_reply(entry("openai.responses", RESP_REQ, resp_stream(RESP_BODY), streamed=True), NEW)
    events = openai_stream(st, ResponseStreamEvent)
    assert [ev.sequence_number for ev in events] == list(range(len(events)))
    assert "".join(ev.delta for ev in events if ev.type == "response.output_text.delta") == NEW
    assert events[-1].type == "response.completed" and events[-1].response.output_text == NEW
    assert events[-1].response.output[0].id == "msg_67ccd2bf17f0819081ff"
    assert wire.reply_text(st) == NEW and wire.usage(st)["output_tokens"] == 87


def test_anthropic_with_reply_json_and_stream_are_read_by_the_sdk():
    js = wire.with_reply(entry("anthropic.messages", ANT_REQ, ANT_JSON), NEW)
    parsed = Message.model_validate(body_json(js))
    assert parsed.content[0].text == NEW and parsed.id == ANT_JSON["id"] and parsed.usage.output_tokens == 503
    st = wire.with_reply(entry("anthropic.messages", {**ANT_REQ, "stream": True}, ANT_SSE, streamed=True), NEW)
    final = accumulate_anthropic(anthropic_stream(st))
    assert [b.type for b in final.content] == ["text"] and final.content[0].text == NEW
    assert final.stop_reason == "end_turn" and final.id == "msg_1nZd" and final.usage.output_tokens == 15
    assert wire.messages(st)[-1] == {"role": "assistant", "content": [{"type": "text", "text": NEW}]}


@pytest.mark.parametrize("api,req", [("openai.chat", CHAT_REQ), ("openai.responses", RESP_REQ),
                                     ("anthropic.messages", {**ANT_REQ, "stream": True})])
def test_a_recorded_429_becomes_a_200_reply_the_sdk_reads(api, req):
    limited = entry(api, req, {"error": {"message": "Rate limit", "type": "rate_limit_error"}}, status=429)
    limited["response"]["headers"].update({"retry-after-ms": "0", "x-should-retry": "true"})
    e = wire.with_reply(limited, NEW)
    assert e["response"]["status"] == 200 and "retry-after-ms" not in e["response"]["headers"]
    if api == "openai.chat":
        assert ChatCompletion.model_validate(body_json(e)).choices[0].message.content == NEW
    elif api == "openai.responses":
        assert openai_stream(e, ResponseStreamEvent)[-1].response.output_text == NEW
    else:
        assert accumulate_anthropic(anthropic_stream(e)).content[0].text == NEW
    assert wire.reply_text(e) == NEW


# -- a reply from a user's file -------------------------------------------------------------------

def test_response_from_file_takes_a_full_body_exactly_or_renders_it_as_a_stream():
    data = json.dumps({**CHAT_JSON, "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                                 "message": {"role": "assistant", "content": "From a file."}}]},
                      indent=2).encode()
    e = wire.response_from_file(entry("openai.chat", CHAT_REQ, CHAT_JSON), data)
    assert exchange.body_bytes(e["response"]["body"]) == data and wire.reply_text(e) == "From a file."
    tool = {**ANT_JSON, "content": [{"type": "text", "text": "Writing."},
                                    {"type": "tool_use", "id": "toolu_9", "name": "write", "input": {"p": "c.txt"}}],
            "stop_reason": "tool_use"}
    st = wire.response_from_file(entry("anthropic.messages", {**ANT_REQ, "stream": True}, ANT_SSE, streamed=True),
                                 json.dumps(tool).encode())
    final = accumulate_anthropic(anthropic_stream(st))
    assert final.content[1].input == {"p": "c.txt"} and final.stop_reason == "tool_use"
    assert wire.messages(st)[-1]["content"][1] == {"type": "tool_use", "id": "toolu_9", "name": "write",
                                                   "input": {"p": "c.txt"}}


def test_response_from_file_with_text_is_the_reply_without_the_editors_newline():
    e = wire.response_from_file(entry("openai.responses", RESP_REQ, resp_stream(RESP_BODY), streamed=True),
                                "Plain ☃ text.\n".encode())
    assert wire.reply_text(e) == "Plain ☃ text."
    assert wire.reply_text(wire.response_from_file(entry("openai.chat", CHAT_REQ, CHAT_JSON), b'{"a": 1}')) == '{"a": 1}'


@pytest.mark.parametrize("data,says", [
    (b"\xff\xfe not text", "neither UTF-8 text nor a JSON response body"),
    (json.dumps(ANT_JSON).encode(), "holds a anthropic.messages response, but step 1 is an openai.chat exchange"),
    (json.dumps({"object": "chat.completion", "choices": [1]}).encode(), "malformed: a chat.completion needs choices"),
])
def test_response_from_file_refuses_a_malformed_file(data, says):
    with pytest.raises(InputFormatError) as e:
        wire.response_from_file(entry("openai.chat", CHAT_REQ, CHAT_JSON), data)
    assert e.value.message.startswith("response: ") and says in e.value.message


def test_a_reply_cannot_be_changed_on_an_exchange_of_an_unknown_api():
    with pytest.raises(UsageError, match="step 4: its exchange is not a call of an LLM API git-pf knows"):
        wire.with_reply({**entry("openai.chat", CHAT_REQ, CHAT_JSON, step=4), "api": "other"}, "x")
