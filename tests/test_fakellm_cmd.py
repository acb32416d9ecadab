"""``python -m git_pf.testing.fakellm``: the offline fake LLM server as a command. It prints its URL,
answers the real SDKs with the replies given, stops cleanly when killed, and says a bad input in one line."""
from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time

import anthropic
import openai
import pytest

CMD = [sys.executable, "-m", "git_pf.testing.fakellm"]


def test_prints_its_url_serves_the_replies_and_stops_on_sigterm():
    tool = '{"tool": "write_file", "args": {"path": "out.txt", "content": "done"}}'
    proc = subprocess.Popen([*CMD, "--reply", "first words", tool], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:") and int(url.rsplit(":", 1)[1]) > 0
        chat = openai.OpenAI(base_url=url + "/v1", api_key="sk-test-none", max_retries=0)
        first = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        assert first.choices[0].message.content == "first words"
        second = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "go on"}])
        call = second.choices[0].message.tool_calls[0].function
        assert (call.name, call.arguments) == ("write_file", '{"content":"done","path":"out.txt"}')
        claude = anthropic.Anthropic(base_url=url, api_key="sk-ant-test-none", max_retries=0)
        reply = claude.messages.create(model="m", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
        assert reply.content[0].text == "first words"  # each api counts its own requests
        third = chat.chat.completions.create(model="m", messages=[{"role": "user", "content": "again"}])
        assert third.choices[0].message.content == "reply 3"  # past the end of the replies
    finally:
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=10)
    assert rc == 0 and proc.stderr.read() == "" and time.monotonic() - started < 5


@pytest.mark.parametrize("args,code,words", [
    (["--port", "70000"], 2, "not a port number"),
    (["--reply", "{not json"], 2, "JSON tool call"),
    (["--reply", '{"name": "x"}'], 2, "JSON tool call"),
    (["--bogus"], 2, "unrecognized arguments"),
])
def test_bad_input_is_one_line(args, code, words):
    proc = subprocess.run([*CMD, *args], capture_output=True, text=True, timeout=30)
    assert proc.returncode == code and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr


def test_a_port_in_use_is_one_line_and_exit_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([*CMD, "--port", str(port)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and f"cannot listen on 127.0.0.1:{port}" in proc.stderr
