"""The Claude Code hook server: one per repository, keeping the hook's work warm.

``python -m git_pf.integrations.claude_code_server GIT_DIR`` listens on
``$GIT_DIR/pf/claude-code/server.sock`` (mode 0600) and handles the events
``git pf hook claude-code`` sends it, one at a time, with one long-lived
``claude_code.Sessions`` (the repository open, each project's stat cache and
directory watch in memory, each transcript read incrementally). A request
with ``"wait": false`` (an event that changes no world: ``UserPromptSubmit``,
``SessionEnd``) is answered "queued" before it is handled, and a failure of
it goes to the hook log only; events are still handled in the order they came. A second
server for the same repository exits at once (a lock). It ends after
``pf.claudeCode.serverIdle`` seconds without an event (default 600), on
SIGTERM, on a ``{"stop": true}`` request, or when a client of another git-pf
version calls (that client handles its event itself). It writes the images
(through ``claude_code``), its socket, pid file and log; nothing else.
"""
from __future__ import annotations

import fcntl
import json
import os
import signal
import socket
import sys
from pathlib import Path

from .claude_code_hook import SOCKET, handle_request, log_line, state_dir

DEFAULT_IDLE_S = 600.0
MAX_REQUEST = 64 << 20
READ_WAIT_S = 10.0


def _idle_seconds(repo) -> float:
    from .. import config

    value = config.get_str(repo.git, "pf.claudeCode.serverIdle")
    try:
        return max(1.0, float(value)) if value is not None else DEFAULT_IDLE_S
    except ValueError:
        return DEFAULT_IDLE_S


def _read(conn: socket.socket) -> dict | None:
    conn.settimeout(READ_WAIT_S)
    chunks, size = [], 0
    while chunk := conn.recv(65536):
        size += len(chunk)
        if size > MAX_REQUEST:
            return None
        chunks.append(chunk)
    try:
        request = json.loads(b"".join(chunks))
    except ValueError:
        return None
    return request if isinstance(request, dict) else None


def _answer(conn: socket.socket, git_dir: str, sessions, version: str) -> bool:
    """Answer one connection; False when the server must end."""
    with conn:
        try:
            request = _read(conn)
        except OSError:
            return True
        if request is None:
            reply, go_on = {"error": "the hook server got a malformed request"}, True
        elif request.get("stop"):
            reply, go_on = {"ok": {"action": "stopped"}}, False
        elif request.get("version") != version:
            reply, go_on = {"restart": True}, False
        elif not isinstance(request.get("event"), str):
            reply, go_on = {"error": "the hook server got a request without an event"}, True
        elif request.get("wait") is False:  # the client has gone on: it hears "queued", the log hears a failure
            try:
                conn.sendall(json.dumps({"ok": {"action": "queued"}}).encode("utf-8"))
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            reply = handle_request(git_dir, request, sessions)
            if reply.get("error"):
                log_line(git_dir, "event", reply["error"])
            return True
        else:
            reply, go_on = handle_request(git_dir, request, sessions), True
        try:
            conn.sendall(json.dumps(reply).encode("utf-8"))
        except OSError:
            pass
        return go_on


def serve(git_dir: str) -> int:
    from .. import __version__
    from ..repo import Repo
    from .claude_code import Sessions

    directory = state_dir(git_dir)
    os.makedirs(directory, exist_ok=True)
    os.chdir(directory)  # the socket is named relative to it (see claude_code_hook._connect)
    lock = open("server.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server has the repository
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    repo = Repo.open(git_dir)
    sessions = Sessions(repo, live=True)
    os.umask(0o077)
    if os.path.lexists(SOCKET):
        os.unlink(SOCKET)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(SOCKET)
    server.listen(64)
    Path("server.pid").write_text(f"{os.getpid()}\n")
    server.settimeout(_idle_seconds(repo))
    try:
        while True:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                break
            if not _answer(conn, git_dir, sessions, __version__):
                break
        os.unlink(SOCKET)  # no new client connects; those already waiting are still answered
        server.setblocking(False)
        while True:
            try:
                conn, _ = server.accept()
            except BlockingIOError:
                break
            conn.setblocking(True)
            _answer(conn, git_dir, sessions, __version__)
    finally:
        server.close()
        for name in (SOCKET, "server.pid"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
        sessions.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m git_pf.integrations.claude_code_server GIT_DIR\n")
        sys.exit(2)
    sys.exit(serve(os.path.abspath(sys.argv[1])))
