"""An offline fake LLM server: ``FakeLLM`` is a real HTTP/1.1 server on 127.0.0.1 that speaks OpenAI
``/v1/chat/completions`` and ``/v1/responses`` and Anthropic ``/v1/messages``, as JSON or as SSE
(``"stream": true``, sent with chunked transfer encoding, one event per chunk), with scripted replies.
It lets an agent run, be recorded, replayed and forked with no network and no API key (docs/record.md,
"Offline fake server"). From a shell:

    python -m git_pf.testing.fakellm [--port N] [--fail-first] --reply TEXT [TEXT...]

prints its URL and serves until killed. From Python:

    with FakeLLM(["hello", {"tool": "read_file", "args": {"path": "a.txt"}}], fail_first=True) as fake:
        client = openai.OpenAI(base_url=fake.openai_url, api_key="sk-test-...")

A script item is a reply text, or ``{"tool": NAME, "args": {...}}`` (optionally with ``"text"``); the script
is a list shared by every api, a dict ``{api: [items]}`` (api: ``openai.chat``, ``openai.responses``,
``anthropic.messages``), or a callable ``(api, request_json, n) -> item`` (n: 1-based, per api; see
``routed``). Past the end of a script the reply is ``"reply N"``. Ids are derived from the request body,
so the same request gets the same ids in every run, whatever the order of concurrent requests.

It opens nothing but its own listening socket on 127.0.0.1; it reads no image and no repository, and no
other git-pf module imports it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import NoReturn

from . import fakellm_bodies as bodies

APIS = {"/v1/chat/completions": "openai.chat", "/v1/responses": "openai.responses",
        "/v1/messages": "anthropic.messages"}
# Sent with every answer so tests can check that cookies never reach an image.
COOKIE = "__fake_session=cookie-secret-3f9a1c7e5b2d4f60"


def normalize(item) -> dict:
    """A script item as ``{"text": str, "tool": str | None, "args": dict}``."""
    if isinstance(item, str):
        return {"text": item, "tool": None, "args": {}}
    if isinstance(item, dict) and ("text" in item or "tool" in item):
        return {"text": item.get("text") or "", "tool": item.get("tool"), "args": dict(item.get("args") or {})}
    raise TypeError(f"a fake LLM reply is a text or {{'tool': name, 'args': {{...}}}}, not {item!r}")


def routed(script, routes: dict):
    """A callable script: a request whose body contains a key of ``routes`` gets that key's reply; the
    others get the items of ``script`` in order. Pins the replies of concurrent requests, whose arrival
    order is not fixed (``demo_agent --concurrent`` marks its side request with ``critic:``)."""
    lock, count = threading.Lock(), [0]

    def pick(api, request, n):
        text = json.dumps(request)
        for marker, item in routes.items():
            if marker in text:
                return item
        with lock:
            count[0] += 1
            k = count[0]
        return script[k - 1] if k <= len(script) else f"reply {k}"

    return pick


class FakeLLM:
    """A scripted LLM server; a context manager (``start()`` / ``stop()`` also work)."""

    def __init__(self, replies=(), *, fail_first: bool = False, retry_after_ms: str = "0",
                 delay_ms: float = 0.0, chunk_delay_ms: float = 0.0, model: str | None = None, port: int = 0):
        self.script = replies
        self._port = port  # 0: a free port
        self.fail_first = fail_first
        self.retry_after_ms = str(retry_after_ms)
        self.delay_ms = delay_ms
        self.chunk_delay_ms = chunk_delay_ms
        self.model = model
        self.requests: list[dict] = []  # {"method", "path", "headers", "body" (bytes), "json", "status"}
        self.max_in_flight = 0
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}
        self._seen: dict[str, int] = {}
        self._in_flight = 0
        self._failed = False
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- life cycle ---------------------------------------------------------------------------------

    def start(self) -> "FakeLLM":
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="fake-llm")
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> "FakeLLM":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        """The server's origin, ``http://127.0.0.1:PORT`` (Anthropic's base URL; git pf's ``--upstream``)."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def env(self) -> dict[str, str]:
        """The base-URL variables an SDK reads, pointing straight at this server (no proxy)."""
        return {"OPENAI_BASE_URL": self.openai_url, "ANTHROPIC_BASE_URL": self.url}

    def served(self, api: str | None = None) -> list[dict]:
        """The requests answered 200 (of one api, or all)."""
        return [r for r in self.requests if r["status"] == 200 and (api is None or r["api"] == api)]

    # --- answering ----------------------------------------------------------------------------------

    def _next(self, api: str, request: dict) -> tuple[dict, int]:
        with self._lock:
            n = self._counts[api] = self._counts.get(api, 0) + 1
        script = self.script
        if callable(script):
            return normalize(script(api, request, n)), n
        items = script.get(api, ()) if isinstance(script, dict) else script
        return normalize(items[n - 1] if n <= len(items) else f"reply {n}"), n

    def _ids(self, api: str, body: bytes) -> dict:
        digest = hashlib.sha256(api.encode() + b"\0" + body).hexdigest()
        with self._lock:
            k = self._seen[digest] = self._seen.get(digest, 0) + 1
        h = hashlib.sha256(f"{digest}:{k}".encode()).hexdigest()[:24]
        prefix = {"openai.chat": "chatcmpl-", "openai.responses": "resp_", "anthropic.messages": "msg_"}[api]
        call = ("toolu_" if api == "anthropic.messages" else "call_") + h[:20]
        return {"id": prefix + h, "call": call, "msg": "msg_" + h, "fc": "fc_" + h, "request": "req_" + h}

    def answer(self, api: str, body: bytes, request: dict) -> tuple[int, dict, list[bytes] | bytes]:
        """(status, headers, JSON bytes or SSE chunks) for one parsed request."""
        with self._lock:
            fail = self.fail_first and not self._failed
            self._failed = self._failed or fail
        ids = self._ids(api, body)
        anthropic = api == "anthropic.messages"
        headers = {"x-request-id" if not anthropic else "request-id": ids["request"], "set-cookie": COOKIE}
        if fail:
            headers.update({"retry-after-ms": self.retry_after_ms, "content-type": "application/json",
                            ("anthropic-ratelimit-requests-remaining" if anthropic
                             else "x-ratelimit-remaining-requests"): "0"})
            err = ({"type": "error", "error": {"type": "rate_limit_error", "message": "rate limited (fake)"}}
                   if anthropic else {"error": {"message": "Rate limit reached (fake)", "type": "requests",
                                                "param": None, "code": "rate_limit_exceeded"}})
            return 429, headers, json.dumps(err).encode()
        reply, _ = self._next(api, request)
        model = self.model or str(request.get("model") or "fake-model")
        usage = bodies.usage_counts(body, reply)
        if not anthropic:
            headers.update({"openai-model": model, "openai-processing-ms": "1", "openai-version": "2020-10-01"})
        if request.get("stream"):
            headers["content-type"] = "text/event-stream; charset=utf-8"
            if api == "openai.chat":
                include = bool((request.get("stream_options") or {}).get("include_usage"))
                return 200, headers, bodies.chat_sse(ids, model, reply, usage, include)
            if api == "openai.responses":
                return 200, headers, bodies.responses_sse(ids, model, reply, usage, request)
            return 200, headers, bodies.anthropic_sse(ids, model, reply, usage)
        headers["content-type"] = "application/json"
        if api == "openai.chat":
            out = bodies.chat_json(ids, model, reply, usage)
        elif api == "openai.responses":
            out = bodies.responses_json(ids, model, reply, usage, request)
        else:
            out = bodies.anthropic_json(ids, model, reply, usage)
        return 200, headers, json.dumps(out, separators=(",", ":")).encode()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body are two writes: no 40 ms delayed-ACK stall between them
    fake: FakeLLM
    timeout = 30

    def log_message(self, *args) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        self._error(404, "not found")

    def do_POST(self) -> None:
        fake = self.fake
        with fake._lock:
            fake._in_flight += 1
            fake.max_in_flight = max(fake.max_in_flight, fake._in_flight)
        try:
            self._post(fake)
        finally:
            with fake._lock:
                fake._in_flight -= 1

    def _post(self, fake: FakeLLM) -> None:
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        path = self.path.split("?", 1)[0]
        record = {"method": "POST", "path": self.path, "api": APIS.get(path, "other"),
                  "headers": {k.lower(): v for k, v in self.headers.items()}, "body": body, "json": None,
                  "status": None}
        with fake._lock:
            fake.requests.append(record)
        if path not in APIS:
            record["status"] = 404
            return self._error(404, f"unknown path {path}")
        try:
            request = json.loads(body)
            assert isinstance(request, dict)
        except (ValueError, AssertionError):
            record["status"] = 400
            return self._error(400, "the body is not a JSON object")
        record["json"] = request
        if fake.delay_ms:
            time.sleep(fake.delay_ms / 1000)
        status, headers, payload = fake.answer(APIS[path], body, request)
        record["status"] = status
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        if isinstance(payload, bytes):
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
            return
        self.send_header("transfer-encoding", "chunked")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        for i, chunk in enumerate(payload):
            if i and fake.chunk_delay_ms:
                time.sleep(fake.chunk_delay_ms / 1000)
            self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            self.wfile.flush()
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _error(self, status: int, message: str) -> None:
        data = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


# --- the command: python -m git_pf.testing.fakellm ------------------------------------------------------


class _Args(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, as every git-pf command says a bad input
        self.exit(2, f"{self.prog}: error: {message}\n")


def _port(text: str) -> int:
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}")
    return int(text)


def _reply(text: str):
    """A ``--reply`` item: a JSON object (``{"tool": ..., "args": {...}}``) when it starts with ``{``."""
    if not text.lstrip().startswith("{"):
        return text
    try:
        return normalize(json.loads(text))
    except (ValueError, TypeError):
        raise argparse.ArgumentTypeError(f"a reply starting with '{{' is a JSON tool call "
                                         f"{{\"tool\": NAME, \"args\": {{...}}}}, not {text[:60]!r}") from None


def main(argv: list[str] | None = None) -> int:
    ap = _Args(prog="python -m git_pf.testing.fakellm",
               description="An offline fake LLM server on 127.0.0.1 (OpenAI chat.completions and responses, "
                           "Anthropic messages; JSON and streamed). Prints its URL, serves until killed.")
    ap.add_argument("--port", type=_port, default=0, help="the port to listen on (default: a free one)")
    ap.add_argument("--reply", nargs="+", type=_reply, default=[], metavar="TEXT",
                    help="the replies, in order (past the last: 'reply N'); a reply starting with '{' is a "
                         'tool call, \'{"tool": "read_file", "args": {"path": "a.txt"}}\'')
    ap.add_argument("--fail-first", action="store_true", help="answer the first request 429 (rate limited)")
    args = ap.parse_args(argv)
    fake = FakeLLM(args.reply, fail_first=args.fail_first, port=args.port)
    try:
        fake.start()
    except OSError as e:
        print(f"{ap.prog}: error: cannot listen on 127.0.0.1:{args.port}: {e.strerror or e}", file=sys.stderr)
        return 1
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(fake.url, flush=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
