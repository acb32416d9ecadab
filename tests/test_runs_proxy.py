"""The recording proxy's routes: each API on its own base path, the run's secret, local answers to
preconnects, strict request framing (docs/record.md, "Proxy").

Real components only: the fake LLM servers of git_pf/testing/fakellm.py, the real ``anthropic`` and
``openai`` SDKs in the agent, the real ``git-pf`` command, raw sockets for framing the SDKs never send."""
from __future__ import annotations

import json
import socket
import sys
import urllib.request

from git_pf.testing.fakellm import FakeLLM
from runs_helpers import report, step_ids, tape

# A preconnect of the kind the Claude Code CLI sends (HEAD on the base URL), then one real SDK call each way.
# The openai client carries an x-api-key header: the proxy used to guess "Anthropic" from it.
BOTH_APIS = """
import os, urllib.request
for url in (os.environ['ANTHROPIC_BASE_URL'], os.environ['OPENAI_BASE_URL']):
    print('preconnect', urllib.request.urlopen(urllib.request.Request(url, method='HEAD')).status)
import anthropic, openai
a = anthropic.Anthropic(api_key='sk-ant-test', max_retries=0)
m = a.messages.create(model='claude-x', max_tokens=10, messages=[{'role': 'user', 'content': 'hi'}])
print('anthropic', m.content[0].text)
o = openai.OpenAI(api_key='sk-test', max_retries=0, default_headers={'x-api-key': 'not-anthropic'})
c = o.chat.completions.create(model='gpt-x', messages=[{'role': 'user', 'content': 'hi'}])
print('openai', c.choices[0].message.content)
"""


def test_each_api_reaches_its_own_upstream_and_a_preconnect_is_no_step(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(["from openai"]) as oa, FakeLLM(["from anthropic"]) as an:
        proc = run_pf("record", "--name", "r", "--upstream", f"openai={oa.url}", "--upstream",
                      f"anthropic={an.url}", "--json", "--", sys.executable, "-c", BOTH_APIS, cwd=root)
        assert [(r["method"], r["path"]) for r in an.requests] == [("POST", "/v1/messages")]
        assert [(r["method"], r["path"]) for r in oa.requests] == [("POST", "/v1/chat/completions")]
    assert "preconnect 200" in proc.stdout and "anthropic from anthropic" in proc.stdout
    assert "openai from openai" in proc.stdout
    assert report(proc.stdout)["steps"] == 2 and sorted(step_ids(root, "r")) == [0, 1, 2]
    entries = [e for e in tape(root, "refs/pf/heads/r") if e.get("kind") == "exchange"]
    assert [e["request"]["family"] for e in entries] == ["anthropic", "openai"]
    # the paths are the API's own, as tapes recorded before the routes hold them: those still match
    assert [e["request"]["path"] for e in entries] == ["/v1/messages", "/v1/chat/completions"]
    # on replay the preconnects are answered again, and are no step the tape must hold
    played = run_pf("replay", "r", "--json", "--", sys.executable, "-c", BOTH_APIS, cwd=root)
    assert report(played.stdout)["bit_exact"] is True and "preconnect 200" in played.stdout


# The agent posts once itself; meanwhile "another process" posts to the proxy's port without the secret
# (the bare origin, and a wrong secret), as any local program could.
INTRUDER = """
import json, os, urllib.error, urllib.parse, urllib.request
base = os.environ['OPENAI_BASE_URL']
origin = '{0.scheme}://{0.netloc}'.format(urllib.parse.urlsplit(base))
body = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'injected'}]}).encode()
for url in (origin + '/v1/chat/completions', origin + '/not-the-secret/openai/v1/chat/completions', origin + '/'):
    try:
        urllib.request.urlopen(urllib.request.Request(url, data=body, method='POST',
                                                      headers={'content-type': 'application/json'}))
        print('accepted', url)
    except urllib.error.HTTPError as e:
        print('refused', e.code)
own = json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': 'mine'}]}).encode()
r = urllib.request.urlopen(urllib.request.Request(base + '/chat/completions', data=own, method='POST',
                                                  headers={'content-type': 'application/json'}))
print('own', r.status)
"""


def test_a_request_without_the_runs_secret_is_refused_and_makes_no_step(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(["ok"]) as fake:
        proc = run_pf("record", "--name", "r", "--upstream", fake.url, "--json", "--",
                      sys.executable, "-c", INTRUDER, cwd=root)
        assert len(fake.requests) == 1  # nothing injected reached the upstream
    assert proc.stdout.count("refused 403") == 3 and "accepted" not in proc.stdout and "own 200" in proc.stdout
    assert report(proc.stdout)["steps"] == 1
    [entry] = [e for e in tape(root, "refs/pf/heads/r") if e.get("kind") == "exchange"]
    assert "mine" in entry["request"]["body"]["text"]


class _Count:
    def __init__(self):
        self.requests = []

    def handle(self, request, reply) -> None:
        self.requests.append(request)
        reply.whole(200, [("Content-Type", "text/plain")], b"seen")


def _raw(proxy, head: str, body: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", proxy.server.server_address[1]), timeout=10) as s:
        s.sendall(head.encode() + body)
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def test_a_chunk_size_that_is_negative_or_not_hex_is_refused():
    from git_pf.runs.proxy import Proxy

    backend = _Count()
    with Proxy(backend) as proxy:
        path = proxy.url.split(str(proxy.server.server_address[1]), 1)[1] + "/openai/v1/chat/completions"
        head = f"POST {path} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        for size in (b"-1", b"0x10", b"zz", b"", b"+5"):
            out = _raw(proxy, head, size + b"\r\n" + b"a" * 64 + b"\r\n0\r\n\r\n")
            assert out.startswith(b"HTTP/1.1 400 "), (size, out[:80])
            assert b"chunk size" in out
        for length in ("-1", "1e3", "abc"):
            out = _raw(proxy, f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
                              "Connection: close\r\n\r\n", b"{}")
            assert out.startswith(b"HTTP/1.1 400 "), (length, out[:80])
        assert backend.requests == []
        good = _raw(proxy, head, b"2\r\n{}\r\n0\r\n\r\n")  # well-formed framing still goes through
        assert good.startswith(b"HTTP/1.1 200 ") and good.endswith(b"seen")
        assert [r.body for r in backend.requests] == [b"{}"] and backend.requests[0].family == "openai"
        head_only = urllib.request.urlopen(urllib.request.Request(proxy.url + "/anthropic", method="HEAD"))
        assert head_only.status == 200 and len(backend.requests) == 1
        assert json.loads(urllib.request.urlopen(proxy.url + "/anthropic/").read()) == {}
        assert len(backend.requests) == 1
