"""A real Git LFS server for tests and benchmarks: giftless on 127.0.0.1, local storage.

``giftless_server(tmp)`` starts ``python tests/lfs_helpers.py`` (giftless's Flask app under
werkzeug's threaded server) with HTTP basic authentication (user ``pf``, password
``secret``: the authenticator below) and yields a ``Giftless`` with the endpoint of one
repository, its storage directory and an access log (one ``METHOD PATH STATUS`` line a
request), so tests count uploads at the server. ``credentials(repo, ...)`` stores a login
for it through git's own ``credential-store`` helper. ``hostile_lfs()`` is a small LFS server
on a thread whose answers a test can make hostile (``HostileLfs.faults``).
"""
from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from transport_helpers import _serving, pf, sh, stop_server

USER, PASSWORD = "pf", "secret"
ORG, REPO = "team", "images"


@dataclass
class Giftless:
    port: int
    storage: Path
    log: Path

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def endpoint(self) -> str:
        return f"{self.base}/{ORG}/{REPO}.git/info/lfs"

    def object_path(self, oid: str) -> Path:
        return self.storage / ORG / REPO / oid

    def objects(self) -> dict[str, int]:
        root = self.storage / ORG / REPO
        return {p.name: p.stat().st_size for p in root.iterdir()} if root.is_dir() else {}

    def requests(self, method: str | None = None) -> list[str]:
        lines = self.log.read_text().splitlines() if self.log.exists() else []
        return [l for l in lines if method is None or l.startswith(method + " ")]

    def uploads(self) -> list[str]:
        """The object ids of every upload the server accepted (PUT, status 200)."""
        return [l.split()[1].rsplit("/", 1)[-1] for l in self.requests("PUT") if l.endswith(" 200")]


@contextmanager
def giftless_server(tmp: Path, env: dict | None = None):
    storage, log, errors = tmp / "lfs-storage", tmp / "lfs-access.log", tmp / "lfs-server.err"
    storage.mkdir(parents=True, exist_ok=True)
    with open(errors, "wb") as err:  # a file, not a pipe: werkzeug logs every request there
        proc = subprocess.Popen([sys.executable, __file__, str(storage), str(log)], stdout=subprocess.PIPE,
                                stderr=err, text=True, env=dict(os.environ, **(env or {})))
    try:
        line = proc.stdout.readline()
        if not line.startswith("listening "):
            raise AssertionError(f"giftless did not start: {line}{errors.read_text()}")
        yield Giftless(int(line.split()[1]), storage, log)
    finally:
        stop_server(proc)


def credentials(repo: Path, server: Giftless, password: str = PASSWORD, user: str = USER) -> None:
    """Configure git's ``credential-store`` helper in ``repo`` with a login for ``server``."""
    store = repo / ".git" / "test-credentials" if (repo / ".git").is_dir() else repo / "test-credentials"
    store.write_text(f"http://{user}:{password}@127.0.0.1%3a{server.port}\n")
    subprocess.run(["git", "config", "credential.helper", f"store --file={store}"], cwd=repo, check=True)


def push_with_a_corrupt_chunk(repo: Path, remote: Path, cached: bool = True) -> str:
    """Flip one byte in the middle of the largest frame in ``repo``'s side store (a chunk of its
    large file, stored raw: the byte is one of its content's), push ``main`` to ``origin``, and
    check that the push stops in one line (exit 3) and moves no image ref on ``remote``; the
    chunk's oid. ``cached=False`` drops the frame from the page cache first, so the push decodes
    it (read past the cache) instead of checking its blocks in place."""
    from git_pf.store.directio import evict

    root = repo / ".git" / "pf" / "objects"
    victim = max((p for p in root.glob("??/*") if p.is_file()), key=lambda p: p.stat().st_size)
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.chmod(0o644)
    victim.write_bytes(bytes(data))
    if not cached:
        evict(victim)
    out = pf("push", "origin", "main", cwd=repo, check=False)
    assert out.returncode == 3 and "Traceback" not in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1 and "is corrupt" in out.stderr, out.stderr
    refs = sh("git", "for-each-ref", "--format=%(refname)", cwd=remote).stdout.split()
    assert "refs/pf/heads/main" not in refs
    return victim.parent.name + victim.name


# -- a server with faults -------------------------------------------------------------------

HOSTILE = "denied\x1b[2J\r\nforged: line\x07\x9b31m" + "x" * 5000  # a server-chosen message


@dataclass
class HostileLfs:
    """The state of ``hostile_lfs``: the objects it holds, the object ids of every GET, the
    ``Range`` each GET asked (None: all), the bytes it sent, and ``faults``: ``refuse`` (each
    object refused with ``HOSTILE``), ``batch-500`` (the batch API answers 500 with
    ``HOSTILE``), ``bad-header`` (upload actions carry a header value with a newline),
    ``drop`` (the first GET of each object closes half way), ``wrong-range`` (a ranged GET
    gets other bytes than it asked for). Ranges are honoured (206), as S3 and the large hosts do."""
    endpoint: str = ""
    objects: dict[str, bytes] = field(default_factory=dict)
    gets: list[str] = field(default_factory=list)
    ranges: list[str | None] = field(default_factory=list)
    sent: int = 0
    faults: set[str] = field(default_factory=set)


class _HostileHandler(BaseHTTPRequestHandler):
    lfs: HostileLfs

    def log_message(self, *args):
        pass

    def _send(self, status: int, body: bytes, length: int | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.git-lfs+json")
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        self.wfile.write(body)

    def _body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def do_POST(self):
        lfs, doc = self.lfs, json.loads(self._body())
        if "batch-500" in lfs.faults:
            return self._send(500, json.dumps({"message": HOSTILE}).encode())
        out = []
        for obj in doc["objects"]:
            oid, href = obj["oid"], f"{lfs.endpoint}/objects/{obj['oid']}"
            entry = {"oid": oid, "size": obj["size"]}
            if "refuse" in lfs.faults:
                entry["error"] = {"code": 422, "message": HOSTILE}
            elif doc["operation"] == "download":
                entry["actions"] = {"download": {"href": href}}
            elif oid not in lfs.objects:
                header = {"X-Token": "a\nInjected: 1"} if "bad-header" in lfs.faults else {}
                entry["actions"] = {"upload": {"href": href, "header": header}}
            out.append(entry)
        self._send(200, json.dumps({"transfer": "basic", "objects": out}).encode())

    def do_PUT(self):
        self.lfs.objects[self.path.rsplit("/", 1)[-1]] = self._body()
        self._send(200, b"")

    def do_GET(self):
        oid = self.path.rsplit("/", 1)[-1]
        data = self.lfs.objects.get(oid)
        if data is None:
            return self._send(404, b"{}")
        self.lfs.gets.append(oid)
        asked = self.headers.get("Range")
        self.lfs.ranges.append(asked)
        if "drop" in self.lfs.faults and self.lfs.gets.count(oid) == 1:
            return self._send(200, data[:len(data) // 2], length=len(data))  # HTTP/1.0: then it closes
        m = re.fullmatch(r"bytes=([0-9]+)-([0-9]+)", asked or "")
        if m is None:
            self.lfs.sent += len(data)
            return self._send(200, data)
        lo, hi = int(m.group(1)), int(m.group(2)) + 1
        if "wrong-range" in self.lfs.faults:
            lo, hi = lo + 1, hi + 1
        part = data[lo:hi]
        self.lfs.sent += len(part)
        self.send_response(206)
        self.send_header("Content-Range", f"bytes {lo}-{lo + len(part) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(part)))
        self.end_headers()
        self.wfile.write(part)


@contextmanager
def hostile_lfs():
    """Yields a ``HostileLfs`` served on 127.0.0.1 (no login)."""
    lfs = HostileLfs()
    handler = type("H", (_HostileHandler,), {"lfs": lfs})
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as base:
        lfs.endpoint = f"{base}/{ORG}/{REPO}.git/info/lfs"
        yield lfs


# -- the server process --------------------------------------------------------------------

def basic_auth(user: str, password: str):
    """A giftless authenticator: the identity of ``user`` (every permission) on a matching
    basic login, none without one (401), Unauthorized for a wrong one."""
    from giftless.auth import Unauthorized
    from giftless.auth.identity import DefaultIdentity, Permission

    def authenticate(request):
        header = request.headers.get("Authorization", "")
        if not header.startswith("Basic "):
            return None
        given = base64.b64decode(header[6:]).decode("utf-8", "replace")
        if given != f"{user}:{password}":
            raise Unauthorized("wrong user name or password")
        identity = DefaultIdentity(name=user, id=user)
        identity.allow(permissions=Permission.all())
        return identity

    return authenticate


class _AccessLog:
    """WSGI middleware: one ``METHOD PATH STATUS`` line per request, written when it ends."""

    def __init__(self, app, path: str):
        self.app, self.path, self.lock = app, path, threading.Lock()

    def __call__(self, environ, start_response):
        seen = {}

        def start(status, headers, exc_info=None):
            seen["status"] = status.split()[0]
            return start_response(status, headers, exc_info)

        try:
            yield from self.app(environ, start)
        finally:
            with self.lock, open(self.path, "a") as f:
                f.write(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']} {seen.get('status', 'aborted')}\n")


def main(storage: str, log: str) -> None:
    from giftless.app import init_app
    from werkzeug.serving import make_server

    config = {
        "LEGACY_ENDPOINTS": False,
        "AUTH_PROVIDERS": [{"factory": "__main__:basic_auth", "options": {"user": USER, "password": PASSWORD}}],
        "TRANSFER_ADAPTERS": {"basic": {"options": {"storage_options": {"path": storage}}}},
        "PRE_AUTHORIZED_ACTION_PROVIDER": {"options": {"private_key": os.urandom(16).hex()}},
    }
    app = init_app(additional_config=config)
    app.wsgi_app = _AccessLog(app.wsgi_app, log)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    print(f"listening {server.server_port}", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    import warnings

    warnings.simplefilter("ignore")
    main(sys.argv[1], sys.argv[2])
