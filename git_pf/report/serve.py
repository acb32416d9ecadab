"""``git pf serve``: every branch's report over HTTP on 127.0.0.1, with fork and run buttons.

The server binds the loopback interface only and answers only requests whose Host header names
it (``127.0.0.1:P`` or ``localhost:P``; anything else, a DNS-rebinding page for one, gets 421 and
nothing else). Any local user can connect to that port, so nothing is served without a credential
only the user who started the server has (as Jupyter does): the URL it prints carries a random
secret (``?token=``), and a GET with that secret is answered with an ``HttpOnly; SameSite=Strict``
session cookie and a redirect to the same page without it; every other request (index, reports,
API) needs that cookie, else 403. No page holds a credential. A POST must also be
``Content-Type: application/json`` and carry no foreign ``Origin`` (else 415 / 403); no CORS header
is sent and OPTIONS gets 405. A path holding a control character (``%00``) is 400, and a client
that drops its connection is no error. Pages are rendered by git_pf.report.render; forks and runs
are git_pf.report.api's. This module reads the repository and writes nothing itself.
"""
from __future__ import annotations

import errno
import hmac
import json
import secrets
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from ..core.errors import PfError, UsageError
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
        self.secret = secrets.token_urlsafe(32)  # in the printed URL only
        self.session = secrets.token_urlsafe(32)  # the cookie's value, given for the secret
        self.cookie = f"pf-serve-{self.port}"  # cookies are not kept apart by port: one name per server
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.origins = {f"http://{host}" for host in self.hosts}
        self.agent = list(agent)
        self.actions = Actions(self.repo_path, self.agent, list(upstreams))
        self.render_lock = threading.Lock()

    @property
    def url(self) -> str:
        """The URL to open: the index, with the secret that buys the session cookie."""
        return f"http://127.0.0.1:{self.port}/?token={self.secret}"

    def handle_error(self, request, client_address) -> None:
        """A client that resets or drops its connection is no error; anything else is one line."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        print(f"git pf serve: a request failed: {type(error).__name__}: {error}", file=sys.stderr)

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

    def _path(self) -> str | None:
        """The request's path, %-decoded, or None after answering 400 for a control character in it."""
        path = unquote(urlsplit(self.path).path, errors="replace")
        if path.startswith("/") and not any(ord(c) < 0x20 or 0x7f <= ord(c) < 0xa0 for c in path):
            return path
        self._error(400, "the path holds a control character or does not start with '/'")
        return None

    def _session_ok(self) -> bool:
        """Whether the request carries the session cookie; else answered 403."""
        for header in self.headers.get_all("Cookie") or []:
            for pair in header.split(";"):
                name, _, value = pair.strip().partition("=")
                if name == self.server.cookie and hmac.compare_digest(value.encode(), self.server.session.encode()):
                    return True
        self._error(403, "no credential: open the URL 'git pf serve' printed (it carries the secret)")
        return False

    def _login(self, path: str) -> bool:
        """A GET carrying ``?token=``: answered (a redirect setting the cookie for the right secret,
        else 403) and True; False when the request carries no token."""
        given = parse_qs(urlsplit(self.path).query).get("token")
        if given is None:
            return False
        if len(given) == 1 and hmac.compare_digest(given[0].encode(), self.server.secret.encode()):
            cookie = f"{self.server.cookie}={self.server.session}; Path=/; HttpOnly; SameSite=Strict"
            where = serve_page.report_path(path[len("/report/"):]) if path.startswith("/report/") else "/"
            self._send(303, b"", "text/plain; charset=utf-8", {"Location": where, "Set-Cookie": cookie})
        else:
            self._error(403, "wrong secret: open the URL 'git pf serve' printed")
        return True

    def _origin_ok(self) -> bool:
        """A POST from a page of another origin (its browser says so) is refused 403."""
        origin = self.headers.get("Origin")
        if origin is None or origin in self.server.origins:
            return True
        self._error(403, "a request from another origin")
        return False

    # -- methods --------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        if not self._host_ok():
            return
        path = self._path()
        if path is None or self._login(path) or not self._session_ok():
            return
        if path == "/":
            return self._index()
        if path.startswith("/report/"):
            return self._report(path[len("/report/"):])
        if not path.startswith("/api/runs/"):
            return self._error(404, "not found")
        number = path[len("/api/runs/"):]
        job = self.server.actions.job(int(number)) if number.isascii() and number.isdigit() else None
        return self._json(200, job) if job else self._error(404, "no such run")

    do_HEAD = do_GET

    def do_POST(self) -> None:  # noqa: N802
        if not self._host_ok():
            return
        path = self._path()
        if path is None or not self._session_ok() or not self._origin_ok():
            return
        action = {"/api/fork": self.server.actions.fork, "/api/run": self.server.actions.run}.get(path)
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
        from ..core.canonjson import strict_loads

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
        from ..image import refs

        repo = self._repo()
        if repo is None:
            return
        try:
            names = refs.list_refs(repo.git, refs.HEADS)
        except PfError as e:
            return self._error(500, str(e))
        self._html(serve_page.index_page(names))

    def _report(self, branch: str) -> None:
        from ..image import refs
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
        self._html(serve_page.with_controls(page, branch=branch, agent=self.server.agent))
