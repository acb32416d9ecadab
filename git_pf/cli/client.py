"""The thin side of the command server (docs/server.md).

``serve(argv)`` hands one ``git pf`` command to the repository's command
server, a pre-imported process that runs it in a forked child: it sends the
argv, environment, working directory, umask and the stdin/stdout/stderr
descriptors (``SCM_RIGHTS``) over a unix socket, forwards SIGINT, SIGTERM and
SIGHUP, and returns the command's exit status. It returns None wherever the
command must run in this process instead: the server is off, missing, stale
or refuses, or the command is not one the server runs. Everything here runs
before every command, so it imports only modules already loaded at start-up
and C modules (``_socket``); ``python -X importtime`` shows it.
"""
from __future__ import annotations

import os
import sys

# where a repository's git directory and its servers' sockets are: shared with the Claude Code hook client
from ..core.gitdir import SUN_PATH_MAX, find_git_dir, private_dir, socket_path  # noqa: F401

# The commands the server runs: short, non-interactive, no daemon, no children to supervise.
# Everything else (record, replay, run, serve, blame, mount, hook, transport, ...) runs in-process.
SERVED = frozenset({"snapshot", "show", "log", "diff", "merge", "ls", "branch", "tag", "switch", "fsck",
                    "checkout", "fork", "verify", "mounts", "-h", "--help"})
# Commands the server runs only for a client with no controlling terminal: ssh and credential
# helpers prompt on /dev/tty, which the server's children do not have; with none, no prompt can be
# lost, since the client could not have shown one either (docs/server.md, "Push and fetch").
SERVED_WITHOUT_TERMINAL = frozenset({"push", "fetch"})
# Arguments that may talk to a terminal or a passphrase prompt, or to a mount's daemon: in-process.
IN_PROCESS_ARGS = ("--edit", "-S", "--gpg-sign", "--mount")
# The wire's version (docs/server.md, "The wire"): part of the token, so a client of another
# version is refused and runs the command in-process. The C client has it built in.
PROTOCOL = 1
# Environment that the interpreter reads at start-up: a server started under other values refuses.
_START_ENV = ("LANG", "LC_ALL", "LC_CTYPE")
MAX_MESSAGE = 1 << 20  # the most a request or a reply may hold
FORWARDED = (2, 15, 1)  # SIGINT, SIGTERM, SIGHUP
LOST = 1  # exit status when the server ends in the middle of a command

IN_SERVER = False  # True in a command the server runs: no second hop
_pending: str | None = None  # a git directory whose server to start once this command is done


def token_base() -> list[str]:
    """The parts of the token fixed by the installation (the C client has them built in)."""
    from .. import __version__

    return [f"git-pf protocol {PROTOCOL}", __version__, os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
            sys.executable]


def token() -> bytes:
    """What client and server must share: the protocol's version, git-pf's version and files, the
    interpreter, and the environment Python reads when it starts (sorted ``NAME=value`` lines)."""
    env = sorted(f"{k}={v}" for k, v in os.environ.items() if k.startswith("PYTHON") or k in _START_ENV)
    return "\0".join([*token_base(), *env]).encode(errors="surrogateescape")


def server_dir(git_dir: str) -> str:
    return os.path.join(git_dir, "pf", "server")


def disabled() -> bool:
    return os.environ.get("GIT_PF_SERVER", "").strip().lower() in ("0", "false", "no", "off")


def route(argv: list[str]) -> str | None:
    """The git directory whose server may run ``argv`` (the arguments after the program), or
    None when the command runs in this process."""
    if IN_SERVER or not argv or disabled() or (argv[0] not in SERVED and argv[0] not in SERVED_WITHOUT_TERMINAL):
        return None
    if any(a == p or a.startswith(p + "=") for a in argv for p in IN_PROCESS_ARGS):
        return None
    try:
        if os.isatty(0):  # a terminal on stdin: prompts and editors read it; in-process
            return None
    except OSError:
        pass
    if argv[0] in SERVED_WITHOUT_TERMINAL and has_terminal():
        return None
    return find_git_dir(os.environ.get("GIT_PF_REPO") or ".")


def has_terminal() -> bool:
    """Whether this process has a controlling terminal (``/dev/tty`` opens): a prompt could reach it."""
    try:
        os.close(os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC))
    except OSError:
        return False
    return True


# -- the wire: each message is a 4-byte length and then fields, each a 4-byte length and bytes --
def pack(fields: list[bytes]) -> bytes:
    body = b"".join(len(f).to_bytes(4, "big") + f for f in fields)
    return len(body).to_bytes(4, "big") + body


def unpack(body: bytes) -> list[bytes]:
    """The fields of one message body; ValueError when it is malformed."""
    out, pos = [], 0
    while pos < len(body):
        if pos + 4 > len(body):
            raise ValueError("truncated field")
        n = int.from_bytes(body[pos:pos + 4], "big")
        pos += 4
        if pos + n > len(body):
            raise ValueError("truncated field")
        out.append(body[pos:pos + n])
        pos += n
    return out


class Reader:
    """Reads whole messages from a socket."""

    def __init__(self, sock):
        self.sock, self.buf = sock, b""

    def message(self) -> list[bytes] | None:
        """The next message's fields; None at end of stream; ValueError when malformed."""
        while True:
            if len(self.buf) >= 4:
                n = int.from_bytes(self.buf[:4], "big")
                if n > MAX_MESSAGE:
                    raise ValueError("message too long")
                if len(self.buf) >= 4 + n:
                    body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                    return unpack(body)
            data = self.sock.recv(65536)
            if not data:
                if self.buf:
                    raise ValueError("truncated message")
                return None
            self.buf += data


def connect(path: str):
    import _socket

    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        s.connect(path)
        cred = s.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)  # pid, uid, gid
        if int.from_bytes(cred[4:8], sys.byteorder) != os.getuid():
            raise PermissionError("the command server is another user's")
    except OSError:
        s.close()
        raise
    return s


def request(kind: bytes, argv: list[str]) -> list[bytes]:
    import signal

    mask = os.umask(0)
    os.umask(mask)
    flags = b"i" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else b""
    env = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in os.environ.items()]
    return [kind, token(), os.fsencode(os.getcwd()), str(mask).encode(), flags, str(len(argv)).encode(),
            *map(os.fsencode, argv), *env]


def serve(argv: list[str]) -> int | None:
    """Run ``argv`` (the arguments after the program) on the repository's server and return its
    exit status; None when it must run in this process (nothing of it has run then). Starts a
    server when there is none, for the commands after this one."""
    git_dir = route(argv)
    if git_dir is None:
        return None
    path = socket_path(git_dir)
    if path is None:
        return None
    try:
        sock = connect(path)
    except OSError:  # no server: this command in-process, the next ones on a new server
        global _pending
        _pending = git_dir
        return None
    import signal

    saved = {sig: signal.getsignal(sig) for sig in FORWARDED}
    try:
        return _talk(sock, argv, git_dir)
    finally:
        sock.close()
        for sig, handler in saved.items():  # a command that runs here after all gets its own handling
            signal.signal(sig, handler)


def _talk(sock, argv: list[str], git_dir: str) -> int | None:
    import _socket
    import signal

    try:
        sock.sendmsg([pack(request(b"run", argv))], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS,
                                                      b"".join(fd.to_bytes(4, sys.byteorder) for fd in (0, 1, 2)))])
    except OSError:
        return None
    reader, started = Reader(sock), False

    def forward(signum, frame):
        try:
            sock.sendall(pack([b"signal", str(signum).encode()]))
        except OSError:
            pass

    for sig in FORWARDED:
        if signal.getsignal(sig) is not signal.SIG_IGN:
            signal.signal(sig, forward)
    while True:
        try:
            fields = reader.message()
        except InterruptedError:  # pragma: no cover - PEP 475 retries; kept for clarity
            continue
        except (OSError, ValueError):
            fields = None
        if fields is None:
            if not started:
                return None  # it ended before the command began: run it here
            sys.stderr.write("git pf: the command server stopped in the middle of the command "
                             "(it may have done part of its work; run it again)\n")
            return LOST
        if not fields:
            continue
        if fields[0] == b"started":
            started = True
        elif fields[0] == b"exit" and len(fields) == 2 and fields[1].isdigit():
            return int(fields[1]) & 0xFF
        elif fields[0] == b"signal" and len(fields) == 2 and fields[1].isdigit() and 0 < int(fields[1]) < 65:
            return _die_by(int(fields[1]))
        elif fields[0] == b"refuse" and not started:
            if fields[1:2] == [b"stale"]:  # git-pf changed since that server started: a new one, after this
                global _pending
                _pending = git_dir
            return None


def ask(git_dir: str, kind: bytes) -> list[bytes] | None:
    """The server's answer to ``status`` or ``stop``; None when no server answers."""
    path = socket_path(git_dir)
    if path is None:
        return None
    try:
        sock = connect(path)
    except OSError:
        return None
    try:
        sock.settimeout(10)
        sock.sendall(pack([kind]))
        return Reader(sock).message()
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def _die_by(signum: int) -> int:
    """The command died by signal ``signum``: so does this process, as it would have in-process
    (a shell then reports the signal); 128 + ``signum`` where it cannot."""
    import signal

    sys.stdout.flush()
    try:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass
    return 128 + signum


def start_pending() -> None:
    """After a command ran in-process because no server was there: start one, unless
    ``pf.server`` is false (read here only when the command loaded pygit2 anyway)."""
    git_dir = _pending
    pygit2 = sys.modules.get("pygit2")
    if git_dir is None or pygit2 is None:
        return
    try:
        on = pygit2.Repository(git_dir).config.get_bool("pf.server")
    except KeyError:
        on = True
    except Exception:
        on = False
    if on:
        start_server(git_dir)


def start_server(git_dir: str) -> None:
    """Start the server of ``git_dir`` in the background, detached from this process's session
    and descriptors; it reads ``pf.server`` itself and ends at once when it is off."""
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        try:
            os.waitpid(pid, 0)  # the middle process exits at once; the server is reparented
        except ChildProcessError:
            pass
        return
    try:
        os.setsid()
        if os.fork():
            os._exit(0)
        fd = os.open(os.devnull, os.O_RDWR)
        for target in (0, 1, 2):
            os.dup2(fd, target)
        os.closerange(3, 65536)
        os.chdir("/")
        os.execv(sys.executable, [sys.executable, "-c", "from git_pf.cli.server import main; main()", git_dir])
    except BaseException:
        pass
    os._exit(127)
