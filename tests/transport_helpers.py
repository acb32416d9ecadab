"""Real git remotes on loopback for transport tests: bare repos, git daemon, git http-backend
behind a small CGI host, and dulwich's own smart-HTTP server; plus world builders."""
from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

BIN = Path(sys.executable).parent
ENV = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", GIT_TERMINAL_PROMPT="0")
for _k in ("GIT_DIR", "GIT_WORK_TREE", "GIT_PF_REPO"):
    ENV.pop(_k, None)


def sh(*args, cwd=None, check=True, env=None, input=None) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          env=dict(ENV, **(env or {})), input=input)
    if check and proc.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def pf(*args, cwd, check=True, env=None, input=None) -> subprocess.CompletedProcess:
    return sh("git-pf", *args, cwd=cwd, check=check, env=env, input=input)


def rand_bytes(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def bare(path: Path) -> Path:
    sh("git", "init", "-q", "--bare", path)
    return path


def origin_of(repo: Path, tmp: Path) -> Path:
    """A fresh bare repository ``tmp/r.git`` added to ``repo`` as its ``origin``."""
    remote = bare(tmp / "r.git")
    sh("git", "remote", "add", "origin", remote, cwd=repo)
    return remote


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc=None, timeout: float = 10) -> None:
    end = time.time() + timeout
    while time.time() < end:
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"server exited early: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise AssertionError(f"nothing listens on port {port}")


@contextmanager
def git_daemon(base: Path):
    port = free_port()
    proc = subprocess.Popen(["git", "daemon", "--reuseaddr", "--enable=receive-pack", "--export-all",
                             f"--base-path={base}", f"--port={port}", "--listen=127.0.0.1", str(base)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=ENV)
    try:
        _wait_port(port, proc)
        yield f"git://127.0.0.1:{port}"
    finally:
        stop_server(proc)


def stop_server(proc: subprocess.Popen, grace: float = 10) -> None:
    """Stop a test server process: SIGTERM, then SIGKILL when it has not exited after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)


def _serve(server) -> threading.Thread:
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    return t


class _CgiHandler(BaseHTTPRequestHandler):
    """Runs ``git http-backend`` as a CGI program for each request."""

    root: str = ""

    def log_message(self, *args):
        pass

    def _run(self):
        path, _, query = self.path.partition("?")
        body = self._body()
        env = dict(ENV, GIT_PROJECT_ROOT=self.root, GIT_HTTP_EXPORT_ALL="1", REQUEST_METHOD=self.command,
                   PATH_INFO=path, QUERY_STRING=query, CONTENT_TYPE=self.headers.get("Content-Type", ""),
                   CONTENT_LENGTH=str(len(body)), REMOTE_ADDR="127.0.0.1", REMOTE_USER="tester",
                   GATEWAY_INTERFACE="CGI/1.1", SERVER_PROTOCOL="HTTP/1.1")
        for header in ("Content-Encoding", "Git-Protocol"):
            if self.headers.get(header):
                env["HTTP_" + header.upper().replace("-", "_")] = self.headers[header]
        out = subprocess.run(["git", "http-backend"], input=body, capture_output=True, env=env).stdout
        head, _, payload = out.partition(b"\r\n\r\n")
        status, headers = 200, []
        for line in head.decode("latin-1").split("\r\n"):
            key, _, value = line.partition(":")
            if key.lower() == "status":
                status = int(value.strip().split()[0])
            elif key:
                headers.append((key, value.strip()))
        self.send_response(status)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    do_GET = do_POST = _run


@contextmanager
def http_backend(base: Path):
    handler = type("H", (_CgiHandler,), {"root": str(base)})
    with _serving(ThreadingHTTPServer(("127.0.0.1", 0), handler)) as url:
        yield url


@contextmanager
def dulwich_http(base: Path):
    from wsgiref.simple_server import make_server

    from dulwich.server import FileSystemBackend
    from dulwich.web import WSGIRequestHandlerLogger, WSGIServerLogger, make_wsgi_chain

    class Quiet(WSGIRequestHandlerLogger):
        def log_message(self, *args):
            pass

    class Backend(FileSystemBackend):  # URL paths arrive with a leading '/'
        def open_repository(self, path):
            path = os.fsdecode(path) if isinstance(path, bytes) else path
            return super().open_repository(path.lstrip("/"))

    app = make_wsgi_chain(Backend(str(base)))
    with _serving(make_server("127.0.0.1", 0, app, handler_class=Quiet, server_class=WSGIServerLogger)) as url:
        yield url


@contextmanager
def _serving(server):
    """Serve ``server`` on a thread; yields its http URL; shut down afterwards."""
    _serve(server)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def remote_of(kind: str, tmp: Path):
    """A fresh bare repository served the ``kind`` way; yields (url, bare repo path)."""
    base = tmp / "srv"
    base.mkdir(exist_ok=True)
    repo = bare(base / "remote.git")
    if kind == "path":
        yield str(repo), repo
    elif kind == "file":
        yield f"file://{repo}", repo
    elif kind == "daemon":
        with git_daemon(base) as url:
            yield f"{url}/remote.git", repo
    elif kind == "http-backend":
        sh("git", "config", "http.receivepack", "true", cwd=repo)
        with http_backend(base) as url:
            yield f"{url}/remote.git", repo
    elif kind == "dulwich":
        with dulwich_http(base) as url:
            yield f"{url}/remote.git", repo
    else:
        raise ValueError(kind)


def objects_bytes(git_dir: Path) -> int:
    """Bytes of every file under a repository's objects/ directory."""
    total = 0
    for dirpath, _, files in os.walk(git_dir / "objects"):
        total += sum(os.path.getsize(os.path.join(dirpath, f)) for f in files)
    return total


def tree_files(root: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        if Path(dirpath) == root and ".pf" in dirs:
            dirs.remove(".pf")
        for f in files:
            p = Path(dirpath) / f
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def source_repo(tmp: Path, big: int = 5 * 1024 * 1024) -> tuple[Path, Path]:
    """Repo A with one image of a sandbox holding a ``big``-byte file; returns (repo, sandbox)."""
    sb = tmp / "sb"
    (sb / "sub").mkdir(parents=True)
    (sb / "big.bin").write_bytes(rand_bytes(big, 1))
    (sb / "sub" / "note.txt").write_text("hello\n")
    pf("init", tmp / "a", cwd=tmp)
    pf("snapshot", "--fs-root", sb, "-m", "first", cwd=tmp / "a")
    return tmp / "a", sb


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def mounted_files(repo: Path, rev: str, mountpoint: Path, env: dict | None = None) -> dict[str, bytes]:
    """The files of ``rev`` read through a read-only FUSE mount at ``mountpoint`` (unmounted afterwards):
    in a clone that holds no object yet, every read goes through the lazy fetcher."""
    mountpoint.mkdir()
    pf("mount", rev, mountpoint, cwd=repo, env=env)
    try:
        return tree_files(mountpoint)
    finally:
        pf("umount", mountpoint, cwd=repo, env=env, check=False)
