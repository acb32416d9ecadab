"""The HTTP proxy between an agent and its LLM API (docs/record.md, "Proxy").

A ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive on 127.0.0.1 at
a free port. Every path starts with the run's secret, then the API family
(``/<secret>/anthropic/...``, ``/<secret>/openai/...``): a request without
the secret is refused 403 before its body is read, so no other local process
can put a step on the run; one without a family is 404. Requests that are no
model exchange (``HEAD``, ``OPTIONS``, a ``GET`` outside ``/v1/``: preconnects
and health checks) are answered here, never by the backend. Otherwise it only
frames: it reads each request whole (``Content-Length`` or chunked, a size
that is not plain hex refused) into a ``Request`` (the family known, the
secret and family taken off its path) and hands it with a ``Reply`` to its
backend, which decides the answer (record: forward upstream, replay: serve
the tape, run: both; see ``record``, ``replay``, ``runon``). A ``Reply``
writes a response whole (``Content-Length``) or chunk by chunk (chunked
transfer encoding, flushed per chunk, so SSE reaches the agent as it
arrives). Writes no git objects and no files; a backend's failure becomes
a 502 for that request, never a dead thread.
"""
from __future__ import annotations

import hmac
import json
import re
import secrets
import socket
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Iterable, Protocol

HOST = "127.0.0.1"
MAX_BODY = 64 << 20  # a request body over this is refused (413)
STOP_POLL_S = 0.05  # how often the server looks for a stop: what stopping it may wait (the default is 0.5 s)
# Headers that describe one connection, never the message: not passed on either way.
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "te", "trailer", "transfer-encoding",
                        "upgrade", "content-length", "host"})
FAMILIES = ("anthropic", "openai")  # the second path segment: which API, so which upstream
_HEX = re.compile(rb"[0-9a-fA-F]{1,16}")
_DIGITS = re.compile(r"[0-9]{1,20}")


@dataclass
class Request:
    method: str
    path: str  # without the query
    query: str  # without the '?'
    headers: list[tuple[str, str]]
    body: bytes
    family: str | None = None  # "anthropic" or "openai": the base path it came on (None: an older tape's)

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k.lower() == name), None)


class Reply:
    """The response to one request, written once: ``whole`` or ``start`` + ``chunk``... + ``end``."""

    def __init__(self, handler: BaseHTTPRequestHandler):
        self._h = handler
        self.started = False
        self._chunked = False

    def _head(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        self.started = True
        h = self._h
        h.send_response_only(status)
        for k, v in headers:
            if k.lower() not in HOP_BY_HOP:
                h.send_header(k, v)

    def whole(self, status: int, headers: Iterable[tuple[str, str]], body: bytes) -> None:
        self._head(status, headers)
        self._h.send_header("Content-Length", str(len(body)))
        self._h.end_headers()
        if self._h.command != "HEAD":
            self._h.wfile.write(body)
        self._h.wfile.flush()

    def start(self, status: int, headers: Iterable[tuple[str, str]]) -> None:
        self._head(status, headers)
        self._chunked = True
        self._h.send_header("Transfer-Encoding", "chunked")
        self._h.end_headers()
        self._h.wfile.flush()

    def chunk(self, data: bytes) -> None:
        if data:
            self._h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self._h.wfile.flush()

    def end(self) -> None:
        if self._chunked:
            self._h.wfile.write(b"0\r\n\r\n")
            self._h.wfile.flush()

    def error(self, status: int, message: str, kind: str = "git_pf_proxy") -> None:
        """A JSON error in the shape both OpenAI and Anthropic clients read (``error.message``)."""
        body = json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
        self.whole(status, [("Content-Type", "application/json")], body)


class Backend(Protocol):
    def handle(self, request: Request, reply: Reply) -> None: ...


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "git-pf-proxy"
    sys_version = ""

    def log_message(self, format, *args):  # the agent's terminal is not ours to write to
        pass

    def setup(self) -> None:
        super().setup()
        # headers and body are separate writes: without this, Nagle and delayed ACKs add ~40 ms
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def _read_body(self) -> bytes | None:
        """The body (None: over ``MAX_BODY``); a ValueError when its framing is malformed."""
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = bytearray()
            while True:
                size_field = self.rfile.readline(1024).split(b";")[0].strip()
                if not _HEX.fullmatch(size_field):  # "-1", "0x10", "" or junk: never read past the cap
                    raise ValueError("a chunk size must be hex digits")
                size = int(size_field, 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    return None
                out += self.rfile.read(size)
                self.rfile.readline(1024)
        length = (self.headers.get("Content-Length") or "0").strip()
        if not _DIGITS.fullmatch(length):
            raise ValueError("Content-Length must be digits")
        return None if int(length) > MAX_BODY else self.rfile.read(int(length))

    def _route(self) -> tuple[str, str] | None:
        """The family and the API path of this request, after the secret; None when refused (answered)."""
        _, _, rest = self.path.partition("/")
        given, slash, rest = rest.partition("/")
        if not hmac.compare_digest(given.encode("utf-8", "surrogateescape"), self.server.secret.encode()):
            self.close_connection = True  # the body is not read: nothing of it is kept either
            Reply(self).error(403, "git-pf proxy: this URL is not the run's (give the base URLs git pf set)",
                              "forbidden")
            return None
        family, _, api_path = rest.partition("/")
        family = family.partition("?")[0]
        if family not in FAMILIES:
            self.close_connection = True
            Reply(self).error(404, "git-pf proxy: no API at this path (use $ANTHROPIC_BASE_URL or $OPENAI_BASE_URL)",
                              "not_found")
            return None
        return family, "/" + api_path

    def _serve(self) -> None:
        route = self._route()
        if route is None:
            return
        reply = Reply(self)
        try:
            body = self._read_body()
        except ValueError as e:
            self.close_connection = True
            return reply.error(400, f"git-pf proxy: malformed request body: {e}")
        if body is None:
            self.close_connection = True
            return reply.error(413, "git-pf proxy: request body too large")
        family, api_path = route
        path, _, query = api_path.partition("?")
        if not model_exchange(self.command, path):  # a preconnect or health check: no step, not matched
            return reply.whole(204 if self.command == "OPTIONS" else 200,
                               [("Content-Type", "application/json")], b"" if self.command == "OPTIONS" else b"{}")
        request = Request(self.command, path, query, list(self.headers.items()), body, family)
        try:
            self.server.backend.handle(request, reply)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # a bug in a backend: this request fails, the proxy lives on
            self.server.failures.append(f"{type(e).__name__}: {e}")
            self.close_connection = True
            if not reply.started:
                reply.error(502, f"git-pf proxy: internal error: {type(e).__name__}: {e}")

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _serve


def model_exchange(method: str, path: str) -> bool:
    """Whether a request is an API call (a step) rather than a preconnect or health check: ``HEAD`` and
    ``OPTIONS`` never are, a ``GET`` only under ``/v1/`` (``GET /v1/models``)."""
    method = method.upper()
    return method not in ("HEAD", "OPTIONS") and (method != "GET" or path.startswith("/v1/"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """An agent that drops its connection is no error of ours, and tracebacks are not for its terminal."""


class Proxy:
    """The proxy server on 127.0.0.1:<free port>, serving ``backend`` from a thread until ``stop``."""

    def __init__(self, backend: Backend):
        self.server = _Server((HOST, 0), _Handler)
        self.server.backend = backend
        self.server.secret = secrets.token_urlsafe(18)  # per run: in every path the child is given
        self.server.failures = []
        self._thread = threading.Thread(target=self.server.serve_forever, args=(STOP_POLL_S,), name="git-pf-proxy",
                                        daemon=True)

    @property
    def origin(self) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}"

    @property
    def url(self) -> str:
        """The base every request must start with: the origin and the run's secret."""
        return f"{self.origin}/{self.server.secret}"

    @property
    def failures(self) -> list[str]:
        """Internal errors a backend raised (one line each)."""
        return self.server.failures

    def env(self) -> dict[str, str]:
        """What a child needs to send its LLM requests here (docs/record.md, "Proxy")."""
        return {"OPENAI_BASE_URL": self.url + "/openai/v1", "ANTHROPIC_BASE_URL": self.url + "/anthropic",
                "GIT_PF_PROXY_URL": self.url}

    def __enter__(self) -> "Proxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
