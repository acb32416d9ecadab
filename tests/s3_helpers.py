"""A real S3 API on loopback for the s3 adapter's tests: moto's server in its own process.

``moto_s3(tmp)`` starts ``moto_server`` on 127.0.0.1 (parts of any size allowed, so tests
can use small multipart uploads) behind a small forwarding server on 127.0.0.1 that notes
every request moto answered (so tests can count uploads), creates a bucket, and yields an
``S3Server``, which can also turn moto's credential checks on and off.
"""
from __future__ import annotations

import http.client
import os
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlsplit

from transport_helpers import BIN, ENV, _wait_port, free_port, stop_server

BUCKET = "pf-test"
# moto accepts any key unless credential checks are on (``S3Server.check_credentials``)
CREDS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass(frozen=True)
class Request:
    method: str
    key: str  # the object key, without the bucket
    query: dict
    body_bytes: int
    status: int


class _Counting(BaseHTTPRequestHandler):
    """Forwards each request to moto and notes those the server answered (what it did)."""

    protocol_version = "HTTP/1.1"
    upstream: tuple[str, int] = ("127.0.0.1", 0)
    seen: list = []
    lock = threading.Lock()

    def log_message(self, *args):
        pass

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            out = b""
            while True:
                n = int(self.rfile.readline().split(b";")[0], 16)
                if n == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass
                    return out
                out += self.rfile.read(n)
                self.rfile.readline()
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n)
        if len(body) != n:
            raise ConnectionError("client went away mid-body")
        return body

    def _forward(self):
        try:
            body = self._body()
        except (ConnectionError, ValueError):
            self.close_connection = True
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("transfer-encoding", "expect")}
        headers["Content-Length"] = str(len(body))
        conn = http.client.HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(self.command, self.path, body=body, headers=headers)
            resp = conn.getresponse()
            payload = resp.read()
        finally:
            conn.close()
        url = urlsplit(self.path)
        _, _, key = unquote(url.path).lstrip("/").partition("/")
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        with self.lock:
            self.seen.append(Request(self.command, key, query, len(body), resp.status))
        self.send_response(resp.status)
        for k, v in resp.getheaders():
            if k.lower() not in ("transfer-encoding", "connection", "content-length", "server", "date"):
                self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _forward


class _Quiet(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address):
        pass  # a client killed mid-request (as the tests do) is expected here


@dataclass
class S3Server:
    endpoint: str  # the counting proxy, which clients use
    direct: str  # moto itself
    seen: list

    def _post(self, path: str, data: bytes = b"") -> bytes:
        req = urllib.request.Request(self.direct + path, data=data, method="POST",
                                     headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.read()

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.direct, region_name="us-east-1",
                            aws_access_key_id="testing", aws_secret_access_key="testing")

    def requests(self) -> list[Request]:
        """Every request through the endpoint that the server answered with success, in order."""
        return [r for r in list(self.seen) if 200 <= r.status < 300]

    def check_credentials(self, on: bool) -> None:
        """From now on refuse (or again accept) keys IAM does not know."""
        self._post("/moto-api/reset-auth", b"0" if on else b"inf")


def config(repo: Path, server: S3Server, prefix: str = "objs", remote: str = "origin",
           per_remote: bool = False) -> str:
    """Point ``remote`` of ``repo`` at the bucket (the endpoint set for every s3 remote, or
    for this one alone); returns the store value."""
    from transport_helpers import sh

    value = f"s3://{BUCKET}/{prefix}"
    sh("git", "config", f"pf.remote.{remote}.store", value, cwd=repo)
    key = f"pf.remote.{remote}.s3Endpoint" if per_remote else "pf.s3.endpoint"
    sh("git", "config", key, server.endpoint, cwd=repo)
    return value


@contextmanager
def moto_s3(tmp: Path):
    port = free_port()
    env = dict(ENV, S3_UPLOAD_PART_MIN_SIZE="1", MOTO_S3_DEFAULT_KEY_BUFFER_SIZE=str(16 << 20), **CREDS)
    log = open(tmp / "moto.log", "wb")  # a file, not a pipe: it logs every request
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=log, env=env, cwd=tmp)
    try:
        _wait_port(port, proc, timeout=30)
        handler = type("Handler", (_Counting,), {"upstream": ("127.0.0.1", port), "seen": []})
        proxy = _Quiet(("127.0.0.1", 0), handler)
        threading.Thread(target=proxy.serve_forever, daemon=True).start()
        server = S3Server(f"http://127.0.0.1:{proxy.server_address[1]}", f"http://127.0.0.1:{port}", handler.seen)
        server.client().create_bucket(Bucket=BUCKET)
        try:
            yield server
        finally:
            proxy.shutdown()
            proxy.server_close()
    finally:
        stop_server(proc)
        log.close()


def env(**extra) -> dict:
    """The environment of a git-pf process talking to the test server: its credentials, and
    no AWS file or instance metadata of the machine running the tests."""
    return dict(CREDS, AWS_CONFIG_FILE=os.devnull, AWS_SHARED_CREDENTIALS_FILE=os.devnull,
                AWS_EC2_METADATA_DISABLED="true", **extra)
