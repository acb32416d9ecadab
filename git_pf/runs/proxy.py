"""The HTTP proxy between an agent and its LLM API (docs/record.md, "Proxy").

A ``ThreadingHTTPServer`` speaking HTTP/1.1 with keep-alive on 127.0.0.1 at
a free port. It only frames: it reads each request whole (``Content-Length``
or chunked) into a ``Request`` and hands it with a ``Reply`` to its
backend, which decides the answer (record: forward upstream, replay: serve
the tape, run: both; see ``record``, ``replay``, ``runon``). A ``Reply``
writes a response whole (``Content-Length``) or chunk by chunk (chunked
transfer encoding, flushed per chunk, so SSE reaches the agent as it
arrives). Writes no git objects and no files; a backend's failure becomes
a 502 for that request, never a dead thread.
"""
from __future__ import annotations

import json
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


@dataclass
class Request:
    method: str
    path: str  # without the query
    query: str  # without the '?'
    headers: list[tuple[str, str]]
    body: bytes

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
        if (self.headers.get("Transfer-Encoding") or "").lower() == "chunked":
            out = bytearray()
            while True:
                size = int(self.rfile.readline(1024).split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                        pass
                    return bytes(out)
                if len(out) + size > MAX_BODY:
                    return None
                out += self.rfile.read(size)
                self.rfile.readline(1024)
        length = int(self.headers.get("Content-Length") or 0)
        return None if length > MAX_BODY or length < 0 else self.rfile.read(length)

    def _serve(self) -> None:
        reply = Reply(self)
        try:
            body = self._read_body()
        except ValueError:
            self.close_connection = True
            return reply.error(400, "git-pf proxy: malformed request body")
        if body is None:
            self.close_connection = True
            return reply.error(413, "git-pf proxy: request body too large")
        path, _, query = self.path.partition("?")
        request = Request(self.command, path, query, list(self.headers.items()), body)
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


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """An agent that drops its connection is no error of ours, and tracebacks are not for its terminal."""


class Proxy:
    """The proxy server on 127.0.0.1:<free port>, serving ``backend`` from a thread until ``stop``."""

    def __init__(self, backend: Backend):
        self.server = _Server((HOST, 0), _Handler)
        self.server.backend = backend
        self.server.failures = []
        self._thread = threading.Thread(target=self.server.serve_forever, args=(STOP_POLL_S,), name="git-pf-proxy",
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.server.server_address[1]}"

    @property
    def failures(self) -> list[str]:
        """Internal errors a backend raised (one line each)."""
        return self.server.failures

    def env(self) -> dict[str, str]:
        """What a child needs to send its LLM requests here (docs/record.md, "Proxy")."""
        return {"OPENAI_BASE_URL": self.url + "/v1", "ANTHROPIC_BASE_URL": self.url, "GIT_PF_PROXY_URL": self.url}

    def __enter__(self) -> "Proxy":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()
