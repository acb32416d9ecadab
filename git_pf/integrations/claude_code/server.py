"""The Claude Code hook server: one per repository, keeping the hook's work warm.

``python -m git_pf.integrations.claude_code.server GIT_DIR`` listens on a
socket in this user's private runtime directory, keyed by the git directory
(``claude_code_hook.server_socket``: never inside the repository, which a
plain copy must be able to copy), and handles the events
``git pf hook claude-code`` sends it, one at a time, with one long-lived
``claude_code.Sessions`` (the repository open, each project's stat cache and
directory watch in memory, each transcript read incrementally). An event is
answered as soon as Claude Code may go on: a step once its world is captured
(the transcript read, the image and the ref come after, and the next event
waits for them); a request with ``"wait": false`` (``UserPromptSubmit``,
``SessionEnd``) before it is handled at all. A failure after the answer goes
to the hook log, and the next answer carries it, so the next hook says it on
stderr. A ``{"sync": true}`` request is answered in its turn,
once every event sent before it is written (``claude_code_hook.sync``). A step waiting for its transcript line stops waiting
when the next event arrives (the next step completes its trace). A second
server for the same repository exits at once (a lock). It ends after
``pf.claudeCode.serverIdle`` seconds without an event (default 600), on
SIGTERM (once the event in hand is written), on a ``{"stop": true}``
request, or when a client of another git-pf version calls (that client
handles its event itself). It writes the images (through ``claude_code``),
its socket, pid file and log; nothing else.
"""
from __future__ import annotations

import fcntl
import json
import os
import select
import signal
import socket
import sys
from pathlib import Path

from .hook import handle_request, log_line, server_socket, state_dir

DEFAULT_IDLE_S = 600.0
_failed_after: list[str] = []  # failures of events already answered: the next answer carries them
MAX_REQUEST = 64 << 20
READ_WAIT_S = 10.0


def _idle_seconds(repo) -> float:
    from ...core import config

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
        answered = []

        def answer(reply: dict | None = None) -> None:  # once: the client goes on
            if answered:
                return
            answered.append(True)
            reply = dict(reply or {"ok": {"action": "queued"}})
            if _failed_after and isinstance(request, dict) and isinstance(request.get("event"), str) \
                    and not reply.get("restart"):  # the hook says so: a failure is never silent
                reply["earlier"] = _failed_after[:]
                _failed_after.clear()
            try:
                conn.sendall(json.dumps(reply).encode("utf-8"))
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

        go_on = True
        if request is None:
            reply = {"error": "the hook server got a malformed request"}
        elif request.get("stop"):
            reply, go_on = {"ok": {"action": "stopped"}}, False
        elif request.get("sync"):  # answered in turn: every event before it is written
            reply = {"ok": {"action": "synced"}}
        elif request.get("version") != version:
            reply, go_on = {"restart": True}, False
        elif not isinstance(request.get("event"), str):
            reply = {"error": "the hook server got a request without an event"}
        else:
            if request.get("wait") is False:  # the client has gone on: it hears "queued", the log hears a failure
                answer()
            reply = handle_request(git_dir, request, sessions, answer)
            if answered and reply.get("error"):
                log_line(git_dir, "event", reply["error"])
                _failed_after.append(reply["error"])
        answer(reply)
        return go_on


def serve(git_dir: str) -> int:
    from ... import __version__
    from ...repo import Repo
    from ...runs.steps import bound_git_memory
    from .session import Sessions

    bound_git_memory()  # a long session writes an image per tool call: its memory stays flat, as a recorder's
    path = server_socket(git_dir)
    if path is None:
        return 0  # no private directory for the socket: each hook handles its event itself
    directory = state_dir(git_dir)
    os.makedirs(directory, exist_ok=True)
    os.chdir(directory)
    lock = open("server.lock", "a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return 0  # another server has the repository
    busy, stopping = [False], [False]

    def term(*_):  # an event in hand is written first: a step is never half-lost
        if not busy[0]:
            sys.exit(0)
        stopping[0] = True

    signal.signal(signal.SIGTERM, term)
    repo = Repo.open(git_dir)
    os.umask(0o077)
    if os.path.lexists(path):
        os.unlink(path)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(64)
    sessions = Sessions(repo, live=True, pause=lambda seconds: bool(select.select([server], [], [], seconds)[0]))
    Path("server.pid").write_text(f"{os.getpid()}\n")
    server.settimeout(_idle_seconds(repo))
    try:
        while not stopping[0]:
            try:
                conn, _ = server.accept()
            except socket.timeout:
                break
            busy[0] = True
            go_on = _answer(conn, git_dir, sessions, __version__)
            busy[0] = False
            if not go_on:
                break
        os.unlink(path)  # no new client connects; those already waiting are still answered
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
        for name in (path, "server.pid"):
            try:
                os.unlink(name)
            except FileNotFoundError:
                pass
        sessions.close()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.stderr.write("usage: python -m git_pf.integrations.claude_code.server GIT_DIR\n")
        sys.exit(2)
    sys.exit(serve(os.path.abspath(sys.argv[1])))
