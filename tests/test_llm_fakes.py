"""The fake LLM servers speak wire formats the real SDKs accept: the real ``openai`` and ``anthropic``
clients, sync and async, JSON and streamed (raw events and the SDKs' stream helpers), the 429 that the
SDK retries, and the agent app that the record / replay tests run as a child."""
from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time

import anthropic
import openai
import pytest

from git_pf.testing.fakellm import COOKIE, FakeLLM, routed

KEY = "sk-test-fakes-0123456789abcdef0123456789abcdef"
TOOL = {"tool": "read_file", "args": {"path": "notes/a.txt"}}
USER = [{"role": "user", "content": "hello"}]
AGENT = ["-m", "git_pf.testing.demo_agent"]


def oai(fake, cls=openai.OpenAI, **kw):
    return cls(base_url=fake.openai_url, api_key=KEY, **kw)


def ant(fake, cls=anthropic.Anthropic, **kw):
    return cls(base_url=fake.url, api_key=KEY, **kw)


def test_openai_chat_json_and_stream():
    with FakeLLM(["two words", TOOL, "streamed reply here", TOOL]) as fake:
        client = oai(fake)
        first = client.chat.completions.create(model="gpt-x", messages=USER)
        assert first.choices[0].message.content == "two words"
        assert first.choices[0].finish_reason == "stop" and first.model == "gpt-x"
        call = client.chat.completions.create(model="gpt-x", messages=USER).choices[0].message.tool_calls[0]
        assert (call.function.name, json.loads(call.function.arguments)) == ("read_file", TOOL["args"])
        chunks = list(client.chat.completions.create(model="gpt-x", messages=USER, stream=True,
                                                     stream_options={"include_usage": True}))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "streamed reply here"
        assert chunks[-1].usage.total_tokens > 0
        with client.chat.completions.stream(model="gpt-x", messages=USER) as stream:
            final = stream.get_final_completion()
        assert final.choices[0].message.tool_calls[0].function.arguments == '{"path":"notes/a.txt"}'
        assert [r["api"] for r in fake.requests] == ["openai.chat"] * 4
        assert fake.requests[0]["headers"]["authorization"] == f"Bearer {KEY}"
        assert fake.requests[0]["json"]["messages"] == USER
        assert [r["json"].get("stream", False) for r in fake.requests] == [False, False, True, True]


def test_openai_responses_json_and_stream():
    with FakeLLM({"openai.responses": ["plain answer", "stream answer", TOOL]}) as fake:
        client = oai(fake)
        assert client.responses.create(model="gpt-x", input="hi", instructions="be brief").output_text == "plain answer"
        events = list(client.responses.create(model="gpt-x", input="hi", stream=True))
        assert events[0].type == "response.created" and events[-1].type == "response.completed"
        assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "stream answer"
        assert events[-1].response.output_text == "stream answer"
        assert [e.sequence_number for e in events] == list(range(len(events)))
        with client.responses.stream(model="gpt-x", input="hi") as stream:
            final = stream.get_final_response()
        assert (final.output[0].type, final.output[0].name) == ("function_call", "read_file")
        assert json.loads(final.output[0].arguments) == TOOL["args"]


def test_anthropic_messages_json_and_stream():
    with FakeLLM(["claude says hi", TOOL, "streamed words", TOOL]) as fake:
        client = ant(fake)
        msg = client.messages.create(model="claude-x", max_tokens=64, messages=USER)
        assert (msg.content[0].text, msg.stop_reason) == ("claude says hi", "end_turn")
        use = client.messages.create(model="claude-x", max_tokens=64, messages=USER)
        assert (use.stop_reason, use.content[-1].name, use.content[-1].input) == ("tool_use", "read_file", TOOL["args"])
        with client.messages.stream(model="claude-x", max_tokens=64, messages=USER) as stream:
            assert "".join(stream.text_stream) == "streamed words"
        with client.messages.stream(model="claude-x", max_tokens=64, messages=USER) as stream:
            final = stream.get_final_message()
        assert final.content[-1].input == TOOL["args"] and final.usage.output_tokens > 0
        sent = fake.requests[0]["headers"]
        assert KEY in (sent.get("x-api-key"), sent.get("authorization", "").removeprefix("Bearer "))


def test_async_clients_json_and_stream():
    async def go(fake):
        client = oai(fake, openai.AsyncOpenAI)
        chat = await client.chat.completions.create(model="gpt-x", messages=USER)
        async with client.chat.completions.stream(model="gpt-x", messages=USER) as stream:
            streamed = await stream.get_final_completion()
        resp = await client.responses.create(model="gpt-x", input="hi", stream=True)
        events = [e async for e in resp]
        claude = ant(fake, anthropic.AsyncAnthropic)
        async with claude.messages.stream(model="claude-x", max_tokens=64, messages=USER) as stream:
            message = await stream.get_final_message()
        return chat, streamed, events, message

    with FakeLLM({"openai.chat": ["a", "b c"], "openai.responses": ["d e f"], "anthropic.messages": [TOOL]}) as fake:
        chat, streamed, events, message = asyncio.run(go(fake))
    assert chat.choices[0].message.content == "a" and streamed.choices[0].message.content == "b c"
    assert events[-1].response.output_text == "d e f"
    assert message.content[-1].type == "tool_use" and message.content[-1].input == TOOL["args"]


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_429_then_200_is_retried_by_the_sdk(sdk):
    with FakeLLM(["after the retry"], fail_first=True) as fake:
        if sdk == "openai":
            reply = oai(fake).chat.completions.create(model="gpt-x", messages=USER).choices[0].message.content
        else:
            reply = ant(fake).messages.create(model="claude-x", max_tokens=64, messages=USER).content[0].text
        assert reply == "after the retry"
        assert [r["status"] for r in fake.requests] == [429, 200]
        assert fake.requests[0]["body"] == fake.requests[1]["body"]  # the same request, sent again


def test_429_reaches_a_client_that_does_not_retry():
    with FakeLLM(["never seen"], fail_first=True, retry_after_ms="1") as fake:
        with pytest.raises(openai.RateLimitError) as err:
            oai(fake, max_retries=0).chat.completions.create(model="gpt-x", messages=USER)
        assert err.value.status_code == 429 and err.value.response.headers["retry-after-ms"] == "1"
        reply = asyncio.run(ant(fake, anthropic.AsyncAnthropic).messages.create(
            model="claude-x", max_tokens=64, messages=USER))
        assert reply.content[0].text == "never seen"  # only the first request fails


def test_ids_depend_on_the_request_not_on_the_order():
    def ids(order):
        with FakeLLM(["x", "x", "x"]) as fake:
            client = oai(fake)
            return {p: client.chat.completions.create(model="m", messages=[{"role": "user", "content": p}]).id
                    for p in order}

    first, second = ids(["a", "b"]), ids(["b", "a"])
    assert first == second and first["a"] != first["b"]


def test_routed_replies_and_concurrent_requests():
    script = routed(["main one", "main two"], {"critic:": "side reply"})
    with FakeLLM(script, delay_ms=150) as fake:
        client = oai(fake)
        out = {}

        def ask(prompt):
            out[prompt] = client.chat.completions.create(model="m", messages=[
                {"role": "user", "content": prompt}]).choices[0].message.content

        threads = [threading.Thread(target=ask, args=(p,)) for p in ("critic: look", "work")]
        [t.start() for t in threads]
        [t.join() for t in threads]
        ask("more work")
    assert out == {"critic: look": "side reply", "work": "main one", "more work": "main two"}
    assert fake.max_in_flight == 2


def test_bad_requests_get_json_errors():
    with FakeLLM() as fake:
        conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
        conn.request("POST", "/v1/nothing", body=b"{}")
        resp = conn.getresponse()
        assert resp.status == 404 and "unknown path" in json.loads(resp.read())["error"]["message"]
        conn.request("POST", "/v1/messages", body=b"not json", headers={"content-type": "application/json"})
        resp = conn.getresponse()  # same keep-alive connection
        assert resp.status == 400 and resp.read()
        conn.close()
        assert [r["status"] for r in fake.requests] == [404, 400]


def test_sse_is_sent_chunk_by_chunk_with_delays():
    with FakeLLM(["one two three four"], chunk_delay_ms=40) as fake:
        conn = http.client.HTTPConnection("127.0.0.1", fake.port, timeout=5)
        body = json.dumps({"model": "m", "messages": USER, "stream": True})
        conn.request("POST", "/v1/chat/completions", body=body, headers={"content-type": "application/json"})
        resp = conn.getresponse()
        assert resp.getheader("transfer-encoding") == "chunked" and COOKIE in resp.getheader("set-cookie")
        stamps = []
        while chunk := resp.read1(65536):
            stamps.append((time.perf_counter(), chunk))
        assert stamps[-1][1].endswith(b"data: [DONE]\n\n")
        assert len(stamps) >= 5 and stamps[-1][0] - stamps[0][0] >= 0.04 * (len(stamps) - 2)


@pytest.mark.parametrize("api,flags", [("openai.chat", ["--stream", "--concurrent"]),
                                       ("openai.responses", ["--async"]),
                                       ("anthropic", ["--async", "--stream", "--concurrent"])])
def test_agent_app_runs_its_tools_on_the_real_sdk(tmp_path, api, flags):
    effects = tmp_path / "outside" / "effects.log"
    effects.parent.mkdir()
    script = routed([{"tool": "write_file", "args": {"path": "out/a.txt", "content": "A"}},
                     {"tool": "read_file", "args": {"path": "out/a.txt"}}, "last words"],
                    {"critic:": "critic reply"})
    with FakeLLM(script, delay_ms=20) as fake:
        proc = subprocess.run([sys.executable, *AGENT, "--api", api, "--steps", "5", "--sandbox", tmp_path / "sb",
                               "--effects-file", effects, *flags], env=dict(os.environ, **fake.env()),
                              capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout.splitlines()[-1].removeprefix("agent: "))
    assert summary["exchanges"] == 5 == len(fake.served())
    assert summary["tools"][:3] == ["write_file", "read_file", "notify"]
    assert (tmp_path / "sb" / "out" / "a.txt").read_text() == "A"
    assert effects.read_text().startswith("halfway: ")  # the irreversible tool's body ran, outside the sandbox
    assert len((tmp_path / "sb" / "log.txt").read_text().splitlines()) == summary["steps"]
    if "--concurrent" in flags:
        assert (tmp_path / "sb" / "critic.txt").read_text() == "critic reply" and fake.max_in_flight == 2
    mains = [json.dumps(r["json"]) for r in fake.served() if "critic:" not in json.dumps(r["json"])]
    assert '"ok"' not in mains[0] and '"ok"' in mains[1]  # the tool's result went back to the model
