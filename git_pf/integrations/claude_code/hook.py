"""``git pf hook claude-code``: the hook command Claude Code runs, which never blocks the agent.

It reads the event JSON on stdin, finds the repository (``GIT_PF_REPO``,
``$CLAUDE_PROJECT_DIR`` or the event's ``cwd``, as git discovers it) and hands
the event to the repository's hook server (``server``), starting
one when none runs, so that the repository, the project's stat cache and the
transcript read so far stay warm between tool calls. With
``pf.claudeCode.server=false``, or when no server can be reached, it handles
the event in this process. Inside a recorded run (``git pf record``, ``replay``,
``run``) each tool call goes onto the run's ledger instead, and ``PreToolUse``
answers or denies an irreversible call replay must not make
(``claude_code_effects``); the run is the record, so no session images are
written then.
Any failure is appended to
``$GIT_DIR/pf/claude-code/hook.log`` and shown as one line on stderr; the exit
status is always 0. This module imports only the standard library at load
time: a warm call costs one small Python process. The command ``install`` writes
runs this file with ``python -S`` (no ``site``: no site-packages, no ``.pth``
files), which halves a bare start; ``full_path`` loads ``site`` only when the
event is handled in this process. Writes nothing but the log (the server or
``claude_code`` write the images).
"""
from __future__ import annotations

import _json  # the C half of json: the json package imports re, enum, functools, collections (~7 ms a call)
import _socket as socket  # the C module: ``socket`` would add enum and selectors to every call's start-up
import os
import sys
import time

STATE_DIR = ("pf", "claude-code")
SOCKET_KIND = "claude-code"  # the hook server's socket, beside the command server's (gitdir.socket_path)
REPLY_WAIT_S = 50.0  # under Claude Code's 60 s hook timeout
START_WAIT_S = 5.0
# Events after which Claude Code changes no file before the next event: the server answers them
# before it writes, and handles every event in the order it came (a failure goes to the log only).
UNAWAITED = ("UserPromptSubmit", "SessionEnd")
CHECK_EVENT = "PfCheck"  # the test event of 'git pf install --claude-code --check'; writes nothing


class _Decoding:
    """What ``_json``'s scanner reads off its context (as ``json.JSONDecoder`` has it)."""

    strict = True
    object_hook = object_pairs_hook = None
    parse_float, parse_int = float, int
    parse_constant = staticmethod({"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}.__getitem__)


_scan = _json.make_scanner(_Decoding)


def loads(data: bytes | str):
    """One JSON value (``json.loads`` without importing json); ValueError when it is not one."""
    text = (data.decode("utf-8") if isinstance(data, bytes) else data).strip(" \t\n\r")
    try:
        value, end = _scan(text, 0)
    except (StopIteration, SystemError):  # bad JSON (_json reports it only once json.decoder is loaded)
        end = -1
    if end != len(text):
        import json

        return json.loads(text)  # raises, saying what is wrong and where
    return value


def dumps(value) -> str:
    """A JSON object of strings, numbers, booleans and None (all a request or a reply holds)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json.encode_basestring_ascii(str(k))}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    if isinstance(value, str):
        return _json.encode_basestring_ascii(value)
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, int):
        return str(int(value))
    raise TypeError(f"cannot send a {type(value).__name__}")


def state_dir(git_dir: str | os.PathLike) -> str:
    return os.path.join(git_dir, *STATE_DIR)


def git_dir_of(start: str) -> str:
    """The git directory a path belongs to (``gitdir.find_git_dir``); LookupError when none."""
    from ...core.gitdir import find_git_dir

    found = find_git_dir(start)
    if found is None:
        raise LookupError(f"not a git repository: '{start}' (run 'git pf init' there)")
    return found


def _start_dir(event: dict) -> str:
    for candidate in (os.environ.get("GIT_PF_REPO"), os.environ.get("CLAUDE_PROJECT_DIR"), event.get("cwd")):
        if isinstance(candidate, str) and candidate and os.path.isdir(candidate):
            return candidate
    return os.getcwd()


def main(data: bytes | None = None) -> int:
    """Handle one event; 0 always (a failure is one line on stderr and a line in the log)."""
    data = sys.stdin.buffer.read() if data is None else data
    git_dir = None
    try:
        try:
            event = loads(data)
        except ValueError:
            event = None  # handle_request says what is wrong with it, in the repository's log
        if isinstance(event, dict) and os.environ.get("GIT_PF_MODE") and os.environ.get("GIT_PF_CHANNEL"):
            from . import effects as claude_code_effects  # inside a recorded run: its ledger, and replay's check

            said = claude_code_effects.handle(event)
            if said is not None:
                import json

                sys.stdout.write(json.dumps(said) + "\n")
            if event.get("hook_event_name") != CHECK_EVENT:
                return 0  # the recorded run is the record: no session images of its own (a replay adds none)
        if isinstance(event, dict) and event.get("hook_event_name") == "PreToolUse":
            return 0  # only a recorded run has anything to check before a tool runs
        git_dir = git_dir_of(_start_dir(event if isinstance(event, dict) else {}))
        request = {"event": data.decode("utf-8", "replace"), "project_dir": os.environ.get("CLAUDE_PROJECT_DIR") or None,
                   "version": _version()}
        if isinstance(event, dict) and event.get("hook_event_name") in UNAWAITED:
            request["wait"] = False
        reply = _via_server(git_dir, request)
        if reply is None:
            reply = handle_request(git_dir, request)
        for line in reply.get("earlier") or ():  # an event the server answered before it failed: logged there
            sys.stderr.write(f"git pf: claude-code hook: an earlier event failed: {line} "
                             f"(logged in {os.path.join(state_dir(git_dir), 'hook.log')})\n")
        if reply.get("error"):
            _fail(git_dir, reply["error"], data)
        elif (reply.get("ok") or {}).get("action") == "checked":
            sys.stdout.write(f"git pf: claude-code hook: ok ({git_dir})\n")
    except Exception as e:  # noqa: BLE001  (a hook must never block the agent: every failure is logged)
        _fail(git_dir, _line(e), data)
    return 0


def handle_request(git_dir: str, request: dict, sessions=None, answer=None) -> dict:
    """Handle one request in this process (``sessions``: a warm ``claude_code.Sessions``);
    ``{"ok": outcome}`` or ``{"error": line}``. Events are handled one at a time per repository.
    ``answer()``: called once Claude Code may go on (``Sessions.handle``)."""
    import fcntl

    full_path()
    from ...core.errors import PfError

    try:
        from . import session as claude_code
        from ...repo import Repo

        event = claude_code.parse_event(request["event"].encode("utf-8"))
        directory = state_dir(git_dir)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "hook.lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            own = sessions is None
            sessions = sessions or claude_code.Sessions(Repo.open(git_dir))
            try:
                outcome = sessions.handle(event, request.get("project_dir"), answer)
            finally:
                if own:
                    sessions.close()
        return {"ok": outcome.to_json()}
    except PfError as e:
        return {"error": e.message}
    except Exception as e:  # noqa: BLE001
        return {"error": _line(e)}


def full_path() -> None:
    """The installed packages on ``sys.path`` when this process started without ``site`` (``-S``)."""
    if sys.flags.no_site and "site" not in sys.modules:
        import site

        site.main()


def _line(e: BaseException) -> str:
    text = " ".join(str(e).split()) or type(e).__name__
    return text if isinstance(e, (LookupError, ValueError)) and not isinstance(e, KeyError) else f"{type(e).__name__}: {text}"


def _version() -> str:
    from ... import __version__

    return __version__


def log_line(git_dir: str, what: str, message: str) -> str | None:
    """Append one line to ``$GIT_DIR/pf/claude-code/hook.log`` (``what``: the event); its path,
    or None when it cannot be written."""
    try:
        log = os.path.join(state_dir(git_dir), "hook.log")
        os.makedirs(os.path.dirname(log), exist_ok=True)
        line = " ".join(f"{str(what)[:200]}: {message}".split())
        with open(log, "a", encoding="utf-8") as f:
            f.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {line}\n")
        return log
    except OSError:
        return None


def _fail(git_dir: str | None, message: str, data: bytes) -> None:
    where = ""
    if git_dir is not None:
        try:
            event = loads(data)
            what = f"{event.get('hook_event_name')} {event.get('session_id')}" if isinstance(event, dict) else "?"
        except ValueError:
            what = "?"
        log = log_line(git_dir, what, message)
        where = f" (logged in {log})" if log else ""
    sys.stderr.write(f"git pf: claude-code hook: {message}{where}\n")


# -- the server connection ---------------------------------------------------
def server_socket(git_dir: str) -> str | None:
    """Where the hook server of ``git_dir`` listens: in this user's private runtime directory,
    keyed by the git directory (``gitdir.socket_path``), never inside the repository (a
    socket there breaks a plain copy of it); None when no private directory can be trusted."""
    from ...core.gitdir import socket_path

    return socket_path(os.path.realpath(git_dir), SOCKET_KIND)


def exchange(git_dir: str, request: dict) -> dict | None:
    """Send one request to the server of ``git_dir``; its reply, or None when there is no server to answer."""
    path = server_socket(git_dir)
    if path is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    chunks = []
    try:
        try:
            sock.connect(path)
        except OSError:  # none listens
            return None
        sock.settimeout(REPLY_WAIT_S)
        sock.sendall(dumps(request).encode("utf-8"))
        sock.shutdown(socket.SHUT_WR)
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except ConnectionError:  # a server that was ending: this process handles the event
        return None
    finally:
        sock.close()
    try:
        reply = loads(b"".join(chunks) or b"null")
    except ValueError:
        return None
    return reply if isinstance(reply, dict) else None


def sync(git_dir: str) -> None:
    """Return once the repository's hook server, if one runs, has written every event it was sent
    (it answers after a step's world is captured and writes the image after): what a command that
    reads a session's images calls first."""
    exchange(git_dir, {"sync": True})


def _server_enabled(git_dir: str) -> bool:
    import subprocess

    out = subprocess.run(["git", f"--git-dir={git_dir}", "config", "--type=bool", "--get", "pf.claudeCode.server"],
                         capture_output=True)
    return out.stdout.strip() != b"false"


def _via_server(git_dir: str, request: dict) -> dict | None:
    """The server's reply, starting the server first when none runs; None: handle it here."""
    reply = exchange(git_dir, request)
    if reply is not None:
        return None if reply.get("restart") else reply
    if server_socket(git_dir) is None or not _server_enabled(git_dir):
        return None
    import subprocess

    directory = state_dir(git_dir)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "server.log"), "ab") as log:
        subprocess.Popen([sys.executable, "-m", "git_pf.integrations.claude_code.server", git_dir],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, close_fds=True,
                         cwd=directory)
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        reply = exchange(git_dir, request)
        if reply is not None:
            return None if reply.get("restart") else reply
        time.sleep(0.01)
    return None


if __name__ == "__main__":  # the installed command: python -S <this file> hook claude-code
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # git_pf's parent
    from git_pf.integrations.claude_code.hook import main as _main

    sys.exit(_main())
