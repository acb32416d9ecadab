"""The Git LFS endpoint of a remote, git's credential helpers, and HTTP requests to the server.

``endpoint`` finds the LFS URL as git-lfs does: ``lfs:<url>``, else
``remote.<name>.lfsurl``, else ``lfs.url``, else the remote's URL with
``.git/info/lfs`` (ssh and scp-like URLs map to https on the same host); a
plain ``http://`` one is refused unless loopback or allowed (``remotes.check_http``).
``Session`` asks ``git credential fill`` for a login when the server answers
401, and tells git ``approve`` / ``reject`` afterwards, as git-lfs does; it
keeps one connection a thread. Reads config and runs git's credential command;
writes nothing of its own.
"""
from __future__ import annotations

import base64
import http.client
import json
import re
import threading
from urllib.parse import urlsplit, urlunsplit

from ..core import config
from ..core.errors import TransferFailed, UsageError
from . import gitcmd, httpbody
from .remotes import Remote, check_http

LFS_JSON = "application/vnd.git-lfs+json"
_IOV_MAX = 1024  # buffers one sendmsg takes (Linux's IOV_MAX)


class _Gathering:
    """A connection whose body may come as lists of buffers (``_Stream``'s runs): each list goes
    out in as few ``sendmsg`` calls as the socket takes, the interpreter lock released for all
    of them, where a buffer at a time would take it back after every 128 KiB (and wait for it
    when the machine is busy); buffer by buffer over TLS, which has no ``sendmsg``."""

    def send(self, data):
        if not isinstance(data, list):
            return super().send(data)
        if self.sock is None:
            self.connect()
        views = [memoryview(v).cast("B") for v in data]
        while views:
            try:
                sent = self.sock.sendmsg(views[:_IOV_MAX])
            except NotImplementedError:  # TLS
                for v in views:
                    self.sock.sendall(v)
                return
            while sent:
                if sent >= len(views[0]):
                    sent -= len(views.pop(0))
                else:
                    views[0], sent = views[0][sent:], 0


class _HTTP(_Gathering, http.client.HTTPConnection):
    pass


class _HTTPS(_Gathering, http.client.HTTPSConnection):
    pass
_SCP = re.compile(r"^(?:[^@/]+@)?([^:/]+):(.+)$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


def endpoint(repo, remote: Remote, explicit: str | None) -> str:
    """The LFS endpoint of ``remote`` (no trailing slash); UsageError when none can be found."""
    found = explicit
    if not found and remote.name:
        found = config.get_str(repo.git, f"remote.{remote.name}.lfsurl")
    found = found or config.get_str(repo.git, "lfs.url")
    if not found:
        found = derive(remote.url)
    if not found or urlsplit(found).scheme not in ("http", "https") or not urlsplit(found).hostname:
        raise UsageError(f"remote '{remote.arg}' has no Git LFS endpoint (its URL is not http(s) or ssh); "
                         f"set one: git pf remote-store {remote.name or 'REMOTE'} lfs:<url>")
    check_http(repo, remote, found, "the lfs endpoint")
    return found.rstrip("/")


def derive(url: str) -> str | None:
    """The endpoint git-lfs derives from a git remote URL, or None (a local path)."""
    parts = urlsplit(url)
    if parts.scheme in ("http", "https"):
        base = urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
    elif parts.scheme in ("ssh", "git+ssh"):
        base = f"https://{parts.hostname}{parts.path.rstrip('/')}"
    elif "://" not in url and _SCP.match(url) and not url.startswith(("/", ".")):
        host, path = _SCP.match(url).groups()
        base = f"https://{host}/{path.lstrip('/').rstrip('/')}"
    else:
        return None
    return (base if base.endswith(".git") else base + ".git") + "/info/lfs"


class Session:
    """Requests to one LFS server: credentials from git, one connection a thread."""

    def __init__(self, repo, url: str):
        self.repo, self.url = repo, url
        parts = urlsplit(url)
        self.host = parts.hostname
        self.origin = (parts.scheme, parts.hostname, parts.port)
        self.user_hint = parts.username
        self._login: dict | None = None
        self._tried = False
        self._approving: gitcmd.Started | None = None
        self._lock = threading.Lock()
        self._local = threading.local()

    # -- credentials ---------------------------------------------------------------
    @staticmethod
    def _fields(fields: dict) -> bytes:
        return ("".join(f"{k}={v}\n" for k, v in fields.items()) + "\n").encode()

    def _credential(self, action: str, fields: dict) -> dict:
        proc = gitcmd.run(self.repo.git_dir, ["credential", action], input=self._fields(fields), check=False,
                          cwd=self.repo.git.workdir or self.repo.git_dir)
        if proc.returncode != 0:
            return {}
        return dict(line.split("=", 1) for line in proc.stdout.decode().splitlines() if "=" in line)

    def _fill(self) -> bool:
        with self._lock:
            if self._tried:
                return self._login is not None
            self._tried = True
            scheme, host, port = self.origin
            fields = {"protocol": scheme, "host": f"{host}:{port}" if port else host,
                      "path": urlsplit(self.url).path.lstrip("/")}
            if self.user_hint:
                fields["username"] = self.user_hint
            got = self._credential("fill", fields)
            if got.get("username") is not None and got.get("password") is not None:
                self._login = {**fields, "username": got["username"], "password": got["password"]}
            return self._login is not None

    def _auth_header(self) -> dict:
        if not self._login:
            return {}
        token = base64.b64encode(f"{self._login['username']}:{self._login['password']}".encode()).decode()
        return {"Authorization": "Basic " + token}

    def approve(self) -> None:
        """Tell git's helpers the login worked: ``git credential approve`` runs while the
        transfers go on (``finish`` waits for it)."""
        with self._lock:
            if self._login and self._approving is None:
                self._approving = gitcmd.Started(self.repo.git_dir, ["credential", "approve"],
                                                 self._fields(self._login),
                                                 cwd=self.repo.git.workdir or self.repo.git_dir)

    def finish(self) -> None:
        """Wait for what ``approve`` started (a later ``approve`` does not start it again)."""
        if self._approving is not None:
            self._approving.wait()

    # -- requests ------------------------------------------------------------------
    def _conn(self, scheme: str, host: str, port: int | None) -> http.client.HTTPConnection:
        key = (scheme, host, port)
        conns = self._local.__dict__.setdefault("conns", {})
        if key not in conns:
            cls = _HTTPS if scheme == "https" else _HTTP
            conns[key] = cls(host, port, timeout=300)
        return conns[key]

    def request(self, method: str, url: str, body=None, headers: dict | None = None,
                sink=None, reset=None, head: dict | None = None, expect: int | None = None) -> tuple[int, bytes]:
        """``(status, body)``; ``sink(chunk)`` takes a 2xx body instead (read by ``httpbody``
        when ``expect``, the size it should have, is known), and ``head`` (when given) gets
        the answer's headers, names in lower case. Same-server requests carry the
        login (unless the action brought its own Authorization). A request whose connection
        breaks is tried once more; when the sink already took bytes, ``reset()`` empties it
        first, and without a ``reset`` the request is not tried again."""
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransferFailed(f"the lfs server at {self.host} sent an unusable URL")
        headers = dict(headers or {})
        same = (parts.scheme, parts.hostname, parts.port) == self.origin
        if same and not any(k.lower() == "authorization" for k in headers):
            headers.update(self._auth_header())
        path = urlunsplit(("", "", parts.path or "/", parts.query, ""))
        replayable = body is None or isinstance(body, (bytes, bytearray, memoryview)) or \
            getattr(body, "replayable", False)  # an iterable body that starts afresh each time
        took = False
        for attempt in range(2):
            conn = self._conn(parts.scheme, parts.hostname, parts.port)
            try:
                conn.request(method, path, body=body, headers=headers)
            except ValueError:  # a header or URL from the server with characters HTTP forbids
                conn.close()
                raise TransferFailed(f"the lfs server at {self.host} sent a header or URL that is not "
                                     f"valid in HTTP") from None
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                if attempt or not replayable:
                    raise TransferFailed(f"the lfs server at {self.host} is unreachable: {clean(str(e))}") from None
                continue
            except BaseException:  # the body's source failed half way: the request must not go on
                conn.close()
                raise
            sock = conn.sock  # the body is read from it even after http.client lets go of it
            try:
                resp = conn.getresponse()
                if head is not None:
                    head.clear()
                    head.update((k.lower(), v) for k, v in resp.getheaders())
                if sink is not None and 200 <= resp.status < 300:
                    def taking(chunk: bytes) -> None:
                        nonlocal took
                        took = True
                        sink(chunk)

                    if expect is not None:
                        httpbody.stream(sock, resp, expect, taking)
                        return resp.status, b""
                    while chunk := resp.read(1 << 20):
                        taking(chunk)
                    if resp.length:  # the server closed before its Content-Length
                        raise http.client.IncompleteRead(b"", resp.length)
                    return resp.status, b""
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException, ValueError) as e:
                conn.close()
                if attempt or not replayable or (took and reset is None):
                    raise TransferFailed(f"the connection to the lfs server at {self.host} broke: "
                                         f"{clean(str(e))}") from None
                if took:
                    reset()  # the retry's body starts from its first byte
                    took = False
            except BaseException:  # the sink refused the body: its rest must not meet the next request
                conn.close()
                raise

    def post_json(self, url: str, doc: dict, headers: dict | None = None, answer: bool = True) -> dict:
        """POST a JSON document to the server, asking git for a login when it answers 401; the
        JSON answer (``answer``; a verify action's body is not read)."""
        body = json.dumps(doc).encode()
        hdrs = {"Accept": LFS_JSON, "Content-Type": LFS_JSON, **(headers or {})}
        status, data = self.request("POST", url, body, hdrs)
        if status == 401 and self._fill():
            status, data = self.request("POST", url, body, hdrs)
        if status in (401, 403):
            if self._login:
                self._credential("reject", self._login)
                raise TransferFailed(f"the lfs server at {self.host} refused the credentials of "
                                     f"'{self._login['username']}' (HTTP {status})")
            raise TransferFailed(f"the lfs server at {self.host} needs credentials (HTTP {status}) and git's "
                                 f"credential helper gave none")
        if not 200 <= status < 300:
            raise TransferFailed(f"the lfs server at {self.host} answered HTTP {status}: {_message(data)}")
        self.approve()
        if not answer:
            return {}
        try:
            out = json.loads(data)
        except ValueError:
            out = None
        if not isinstance(out, dict):
            raise TransferFailed(f"the lfs server at {self.host} sent an answer that is not JSON")
        return out


def clean(text: str, limit: int = 200) -> str:
    """Server-chosen ``text`` made fit for one line of stderr: control characters (C0, DEL, C1)
    become spaces, and at most ``limit`` characters remain."""
    text = _CONTROL.sub(" ", text).strip()
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _message(data: bytes) -> str:
    """The ``message`` of a server's error answer (or its first line), cleaned."""
    try:
        doc = json.loads(data)
        text = str(doc.get("message", "")) if isinstance(doc, dict) else ""
    except ValueError:
        lines = data[:1000].decode("utf-8", "replace").strip().splitlines()
        text = lines[0] if lines else ""
    return clean(text) or "(no message)"
