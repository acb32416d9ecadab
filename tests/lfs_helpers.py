"""A real Git LFS server for tests and benchmarks: giftless on 127.0.0.1, local storage.

``giftless_server(tmp)`` starts ``python tests/lfs_helpers.py`` (giftless's Flask app under
werkzeug's threaded server) with HTTP basic authentication (user ``pf``, password
``secret``: the authenticator below) and yields a ``Giftless`` with the endpoint of one
repository, its storage directory and an access log (one ``METHOD PATH STATUS`` line a
request), so tests count uploads at the server. ``credentials(repo, ...)`` stores a login
for it through git's own ``credential-store`` helper.
"""
from __future__ import annotations

import base64
import os
import subprocess
import sys
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transport_helpers import stop_server

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
