"""``git pf serve``: every branch's report over HTTP on 127.0.0.1, with fork and run buttons.

The server binds the loopback interface only and answers only requests whose Host header names
it (``127.0.0.1:P`` or ``localhost:P``; anything else, a DNS-rebinding page for one, gets 421 and
nothing else). It sends no CORS header, so no other origin can read an answer, and answers OPTIONS
with 405. Every ``/api/`` request carries the per-server random token its pages embed (header
``X-PF-Token``; without it: 403); the state-changing ones are POST with a JSON body. Pages are
rendered by git_pf.report.render; forks and runs are git_pf.report.api's. This module reads the
repository and writes nothing itself.
"""
from __future__ import annotations

import errno
import hmac
import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

from ..errors import PfError, UsageError
from . import serve_page
from .api import Actions, Conflict

MAX_BODY = 2 << 20  # bytes of a request body
CSP = ("default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


class ReportServer(ThreadingHTTPServer):
    """The HTTP server of one repository; ``agent`` is the command the run button starts (may be empty)."""

    daemon_threads = True
    allow_reuse_address = False  # a port in use is an error, not shared

    def __init__(self, repo, port: int = 0, agent: list[str] = (), upstreams: list[str] = ()):
        try:
            super().__init__(("127.0.0.1", port), Handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise UsageError(f"port {port} is in use", param="port") from None
            if e.errno == errno.EACCES:
                raise UsageError(f"port {port} needs privileges to bind", param="port") from None
            raise
        self.repo_path = Path(repo.git_dir)
        self.port = self.server_address[1]
        self.token = secrets.token_urlsafe(32)
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.agent = list(agent)
        self.actions = Actions(self.repo_path, self.agent, list(upstreams))
        self.render_lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def close(self) -> None:
        """Stop serving, stop the runs still going, release the port."""
        self.actions.close()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    server: ReportServer
    server_version = "git-pf"
    sys_version = ""
    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args) -> None:  # noqa: A002 - the base class's name
        pass  # no access log: the terminal shows the agent's output and errors only

    # -- answers --------------------------------------------------------
    def _send(self, status: int, body: bytes, kind: str, extra: dict | None = None) -> None:
        self.send_response(status)
        headers = {"Content-Type": kind, "Content-Length": str(len(body)), "Cache-Control": "no-store",
                   "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
                   "X-Frame-Options": "DENY", "Content-Security-Policy": CSP, **(extra or {})}
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, data: dict, extra: dict | None = None) -> None:
        self._send(status, json.dumps(data, sort_keys=True).encode(), "application/json", extra)

    def _error(self, status: int, line: str, extra: dict | None = None) -> None:
        self.close_connection = True  # a body it did not read must not be taken for the next request
        self._json(status, {"error": line}, extra)

    def _html(self, page: str) -> None:
        self._send(200, page.encode("utf-8"), "text/html; charset=utf-8")

    # -- checks ---------------------------------------------------------
    def _host_ok(self) -> bool:
        if self.headers.get("Host", "") in self.server.hosts and len(self.headers.get_all("Host") or []) == 1:
            return True
        self._error(421, "this server answers only to 127.0.0.1 and localhost on its own port")
        return False

    def _token_ok(self) -> bool:
        given = self.headers.get("X-PF-Token", "")
        if given and hmac.compare_digest(given.encode(), self.server.token.encode()):
            return True
        self._error(403, "missing or wrong token: use the buttons of a page this server served")
        return False

    # -- methods --------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            return
        path = urlsplit(self.path).path
        if path == "/":
            return self._index()
        if path.startswith("/report/"):
            return self._report(unquote(path[len("/report/"):]))
        if not path.startswith("/api/"):
            return self._error(404, "not found")
        if not self._token_ok():
            return
        number = path[len("/api/runs/"):] if path.startswith("/api/runs/") else ""
        job = self.server.actions.job(int(number)) if number.isascii() and number.isdigit() else None
        return self._json(200, job) if job else self._error(404, "no such run")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok() or not self._token_ok():
            return
        action = {"/api/fork": self.server.actions.fork, "/api/run": self.server.actions.run}.get(urlsplit(self.path).path)
        if action is None:
            return self._error(404, "not found")
        body = self._body()
        if body is None:
            return
        try:
            return self._json(200, action(body))
        except Conflict as e:
            return self._error(409, str(e))
        except PfError as e:
            return self._error(400 if isinstance(e, UsageError) else 500, str(e))

    def do_OPTIONS(self) -> None:  # noqa: N802
        if self._host_ok():
            self._error(405, "no cross-origin requests", {"Allow": "GET, HEAD, POST"})

    def _body(self) -> dict | None:
        """The request's JSON object, or None after answering why not."""
        kind = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind != "application/json":
            self._error(415, "the body must be application/json")
            return None
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY:
            self._error(413 if length > MAX_BODY else 411, f"a body of 0 to {MAX_BODY} bytes with its Content-Length")
            return None
        from ..canonjson import strict_loads

        try:
            body = strict_loads(self.rfile.read(length))
        except (ValueError, UnicodeDecodeError):
            body = None
        if not isinstance(body, dict):
            self._error(400, "the body must be a JSON object")
            return None
        return body

    # -- pages ----------------------------------------------------------
    def _repo(self):
        """The server's repository, or None after answering 500: gone or damaged, it is no request's fault."""
        from ..repo import Repo

        try:
            return Repo.open(self.server.repo_path)
        except PfError as e:
            self._error(500, str(e))
            return None

    def _index(self) -> None:
        from .. import refs

        repo = self._repo()
        if repo is None:
            return
        try:
            names = refs.list_refs(repo.git, refs.HEADS)
        except PfError as e:
            return self._error(500, str(e))
        self._html(serve_page.index_page(names))

    def _report(self, branch: str) -> None:
        from .. import refs
        from .render import render_report

        repo = self._repo()
        if repo is None:
            return
        try:
            refs.check_name(branch)
            if refs.branch_tip(repo.git, branch) is None:
                return self._error(404, f"no branch '{branch}'")
            with self.server.render_lock:
                page = render_report(repo, branch, connect="'self'")  # its blame run, if any, comes with it
        except PfError as e:  # 404: no such branch or not a recorded run; 500: damaged data (DataError)
            return self._error(404 if isinstance(e, UsageError) else 500, str(e))
        self._html(serve_page.with_controls(page, token=self.server.token, branch=branch, agent=self.server.agent))
