"""The command server of one repository (docs/server.md): a pre-imported parent that runs
each ``git pf`` command a client hands it in a forked child.

The parent imports the CLI, pygit2 and the command implementations once and
never runs a command itself. It keeps one child forked ahead of the next
command, the spare: past the fork, the pages that commands write already
copied (``warm``) and the repository opened with the current branch's newest
images read (``_open_ahead``: kept by object id only), it waits on the
listening socket itself, so a command costs
neither a fork nor a hop through the parent. The spare that takes a command
becomes its child: it changes to the client's directory, environment and
umask, takes its stdin/stdout/stderr, resets its signal handlers and runs the
Typer application, so nothing of one command (config, signals, working
directory, errors) reaches the next; once it has ended the parent forks the
next spare. While a command runs, the parent accepts and forks per command
(commands at once). The server listens on a 0600 unix socket
(``cli.client.socket_path``), answers only its own user (``SO_PEERCRED``),
kills a command's process group when its client goes away, keeps a file
watcher per snapshotted sandbox (``layers.world.watch``), and ends when idle
for ``pf.server.idleTimeout``, when ``pf.server`` is turned off, when its own
installed files change (a new server starts on the next command), on ``git pf
server stop`` and on SIGTERM. Reads the repository's config; writes only its
socket, lock and info files.
"""
from __future__ import annotations

import array
import errno
import fcntl
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

from ..layers.world import watch as cmdwatch
from . import client as cmdclient

DEFAULT_IDLE_S = 600
KILL_GRACE_S = 2.0  # after SIGTERM to a command whose client went away, SIGKILL
LINGER_S = 0.1  # the next spare waits this long at most for the last command's client to end (``Server.ending``)
READ_TIMEOUT_S = 5.0  # a client must send its whole request within this
ASK_TIMEOUT_S = 30.0  # a spare waits this long for the parent's answer
_PR_SET_PDEATHSIG = 1
_MADV_POPULATE_WRITE = 23  # Linux 5.14: fault pages in writable, as writing to each of them would
MAX_SERVERS = 8  # per user: a new server stops the one idle longest beyond this
SPARE_FAILURES = 3  # spares that end this often in a row without a command: the parent forks per command
LEARN_PER_KIND = 2  # the first commands of each kind report the pages they wrote: spares warm those
MAX_WARM_PAGES = 1 << 14  # at most 64 MiB warmed per spare
AHEAD_IMAGES = 20  # a spare reads this many of the current branch's images before it waits (``_open_ahead``)
AHEAD_COMMITS = 256  # and this many of its commits (``log`` walks the whole history before its first line)
HELP_COLUMNS = 80  # top-level help is answered from the text made at start-up for a width of this or more
HELP_ARGS = (["-h"], ["--help"])
# What the parent loads before it forks: the CLI and what the served commands run.
LIGHT_DEPENDENCIES = frozenset({"git_pf", "typer", "click", "pygit2", "zstandard", "pathspec", "pyfastcdc", "xattr",
                                "_cffi_backend", "cffi"})
PRELOAD = ("git_pf.cli.app", "git_pf.cli.commands", "git_pf.repo", "git_pf.ops.snapshot", "git_pf.image.history",
           "git_pf.ops.diff", "git_pf.merge", "git_pf.ops.checkout", "git_pf.ops.fsck", "git_pf.image.verify", "git_pf.ops.fork",
           "git_pf.layers.world.capture", "git_pf.layers.world.statcache", "git_pf.store.sidestore",
           "git_pf.transport.lazy", "git_pf.runs.stepworld", "typer._click.decorators", "typer._click._textwrap")
# What a child compares between the client and itself: a child cannot become another of these.
_NAMESPACES = ("ns/mnt", "ns/pid", "ns/user", "ns/net", "root")
_RLIMITS = tuple(getattr(resource, n) for n in dir(resource) if n.startswith("RLIMIT_"))
_LIBC = None


def _libc():
    global _LIBC
    if _LIBC is None:
        import ctypes

        _LIBC = ctypes.CDLL(None, use_errno=True)
        _LIBC.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    return _LIBC


def idle_timeout(git) -> float:
    """``pf.server.idleTimeout``: seconds, or a number with s, m or h (default 10 minutes)."""
    try:
        raw = str(git.config["pf.server.idleTimeout"]).strip().lower()
    except (KeyError, ValueError):
        return DEFAULT_IDLE_S
    scale = {"s": 1, "m": 60, "h": 3600}.get(raw[-1:], None)
    try:
        value = float(raw[:-1] if scale else raw) * (scale or 1)
    except ValueError:
        return DEFAULT_IDLE_S
    return value if value > 0 else DEFAULT_IDLE_S


def enabled(git) -> bool:
    """``pf.server`` (default true); a value that is not a boolean counts as off."""
    try:
        return bool(git.config.get_bool("pf.server"))
    except KeyError:
        return True
    except Exception:
        return False


def _package_dirs() -> list[str]:
    """Every directory holding git-pf's code: the ``git_pf`` package and its subpackages."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(cmdclient.__file__)))
    out = []
    for d, subdirs, _ in os.walk(root):
        subdirs[:] = [s for s in subdirs if s != "__pycache__" and not s.startswith(".")]
        out.append(d)
    return out


class CodeWatch:
    """Notices a change to git-pf's installed files (a reinstall, an edit): the server is stale.
    Only the parent reads its events; a spare only looks whether some are waiting (``pending``)
    and then asks the parent."""

    def __init__(self):
        from ..core.fswatch import MASK, _libc

        self.libc = _libc()
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC) if self.libc else -1
        self.changed = self.fd < 0  # no inotify: the token alone guards (version and path)
        for d in _package_dirs() if self.fd >= 0 else ():
            if self.libc.inotify_add_watch(self.fd, os.fsencode(d), MASK) < 0:
                self.changed = True

    def stale(self) -> bool:
        from ..core.fswatch import _EVENT

        while self.fd >= 0 and not self.changed:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            pos = 0
            while pos + _EVENT.size <= len(data):
                _, _, _, size = _EVENT.unpack_from(data, pos)
                name = data[pos + _EVENT.size: pos + _EVENT.size + size].rstrip(b"\0")
                pos += _EVENT.size + size
                if name != b"__pycache__":
                    self.changed = True
        return self.changed

    def pending(self) -> bool:
        """Whether events wait to be read (the parent has not judged them yet)."""
        if self.fd < 0:
            return self.changed
        return bool(select.select([self.fd], [], [], 0)[0])


class Job:
    """One command running in a child: its client connection, process and report pipe."""

    def __init__(self, conn, pid: int, report: int, watched):
        self.conn, self.pid, self.report, self.watched = conn, pid, report, watched
        self.reader = cmdclient.Reader(conn)
        self.kill_at: float | None = None  # SIGKILL deadline once the client is gone
        self.gone = False
        self.said = b""  # what it wrote to the report pipe so far
        self.said_all = False


class Channel:
    """Messages (``cmdclient.pack``) between the parent and its spare over a socket pair, with
    descriptors (SCM_RIGHTS); what was read beyond one message waits for the next call."""

    def __init__(self, sock):
        self.sock, self.buf, self.fds, self.ended = sock, b"", [], False

    def send(self, fields: list[bytes], fds: list[int] = ()) -> None:
        data = cmdclient.pack(fields)
        if fds:
            sent = self.sock.sendmsg([data], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, struct.pack(f"{len(fds)}i", *fds))])
            data = data[sent:]
        if data:
            self.sock.sendall(data)

    def _size(self) -> int | None:
        if len(self.buf) < 4:
            return None
        n = int.from_bytes(self.buf[:4], "big")
        if n > cmdclient.MAX_MESSAGE:
            raise ValueError("message too long")
        return n if len(self.buf) >= 4 + n else None

    def waiting(self) -> bool:
        """Whether a whole message waits here, read already."""
        return self._size() is not None

    def receive(self, wait: float | None) -> list[bytes] | None:
        """The next message (None at the end); BlockingIOError or TimeoutError when none came
        within ``wait`` seconds (0: none waits)."""
        while True:
            n = self._size()
            if n is not None:
                body, self.buf = self.buf[4:4 + n], self.buf[4 + n:]
                return cmdclient.unpack(body)
            if self.ended:
                if self.buf:
                    raise ValueError("truncated message")
                return None
            self.sock.settimeout(READ_TIMEOUT_S if self.buf else wait)  # the rest of a message that has begun
            data, anc, _, _ = self.sock.recvmsg(1 << 16, socket.CMSG_SPACE(4 * 4))
            for level, kind, payload in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    self.fds += list(struct.unpack(f"{len(payload) // 4}i", payload[:len(payload) // 4 * 4]))
            if data:
                self.buf += data
            else:
                self.ended = True

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        self.sock.close()


class Spare:
    """The parent's side of the spare child: its channel (the spare asks, the parent answers;
    ``run`` hands the parent a copy of the client's connection) and report pipe."""

    def __init__(self, pid: int, ctl, report: int):
        self.pid, self.ctl, self.chan, self.report = pid, ctl, Channel(ctl), report
        self.watched = None  # the watch a snapshot it took holds (``watch``)
        self.told_quit = False
        self.hung_up = False  # its control socket ended


class Request:
    """A ``run`` request's fields: cwd, umask, flags, argc, argv, environment."""

    def __init__(self, fields: list[bytes]):
        self.cwd, self.umask, self.sigint_ignored = os.fsdecode(fields[2]), int(fields[3]), b"i" in fields[4]
        argc = int(fields[5])
        if argc < 0 or 6 + argc > len(fields):
            raise ValueError("argc")
        self.argv = [os.fsdecode(a) for a in fields[6:6 + argc]]
        self.env = {}
        for item in fields[6 + argc:]:
            k, sep, v = item.partition(b"=")
            if sep and k:
                self.env[os.fsdecode(k)] = os.fsdecode(v)


class Server:
    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self.token = cmdclient.token()
        self.jobs: dict[int, Job] = {}
        # connections of commands that ended, until their clients hang up (or LINGER_S): the next
        # spare is forked after, so that its set-up takes no CPU from a client reading its status
        self.ending: dict[object, float] = {}
        self.watches = cmdwatch.Watches(os.fsencode(git_dir))
        self.stopping = False
        self.terminated = False  # SIGTERM came: the loop stops
        self.last = time.monotonic()
        self.started = time.time()
        self.served = 0
        self.spare: Spare | None = None
        self.spare_failures = 0
        self.warm: set[int] = set()  # pages (by number) that commands wrote: each spare writes them first
        self.warm_ranges: list[tuple[int, int]] = []
        self.learned: dict[str, int] = {}  # commands of each kind that reported their pages
        self.help: bytes | None = None  # `git pf -h` for HELP_COLUMNS or more, made at start-up
        self.pid = os.getpid()

    # -- start-up ------------------------------------------------------
    def setup(self) -> bool:
        d = cmdclient.server_dir(self.git_dir)
        os.makedirs(d, mode=0o700, exist_ok=True)
        self.lock = os.open(os.path.join(d, "lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:  # a stopping server lets go of it as it unlinks its socket
            fcntl.flock(self.lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False  # another server holds it: that one serves
        import pygit2

        git = pygit2.Repository(self.git_dir)
        if not enabled(git):
            return False
        self.idle_s = idle_timeout(git)
        del git
        self.path = cmdclient.socket_path(self.git_dir)
        if self.path is None:
            return False
        try:
            os.unlink(self.path)  # a dead server's: the lock says none is alive
        except FileNotFoundError:
            pass
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            self.sock.bind(self.path)
        finally:
            os.umask(old)
        os.chmod(self.path, 0o600)
        self.sock.listen(64)
        self.sock.setblocking(False)
        self.code = CodeWatch()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_term)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._write_info()
        self._register()
        return True

    def _on_term(self, *_) -> None:
        self.terminated = True  # the loop stops; nothing is sent from inside a signal handler

    def _register(self) -> None:
        """Note this server in the user's registry and stop the one idle longest when more than
        ``MAX_SERVERS`` run: a run of many short-lived repositories (a test suite) keeps a
        bounded number of servers in memory."""
        base = cmdclient.private_dir()
        if base is None:
            self.entry = None
            return
        reg = os.path.join(base, "servers")
        os.makedirs(reg, mode=0o700, exist_ok=True)
        self.entry = os.path.join(reg, str(os.getpid()))
        with open(self.entry, "w") as f:
            f.write(self.git_dir)
        live = []
        for name in os.listdir(reg):
            if not name.isdigit() or int(name) == os.getpid():
                continue
            pid, entry = int(name), os.path.join(reg, name)
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    ours = b"git_pf.cli.server" in f.read()
                live.append((os.stat(entry).st_mtime, pid) if ours else None)
            except OSError:
                ours = False
            if not ours:
                try:
                    os.unlink(entry)
                except OSError:
                    pass
        live = sorted(x for x in live if x)
        for _, pid in live[:max(0, len(live) + 1 - MAX_SERVERS)]:
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass

    def _touch(self) -> None:
        if self.entry is not None:
            try:
                os.utime(self.entry)
            except OSError:
                pass

    def close(self) -> None:
        """On the way out: the registry entry goes."""
        if getattr(self, "entry", None):
            try:
                os.unlink(self.entry)
            except OSError:
                pass

    def _write_info(self) -> None:
        info = os.path.join(cmdclient.server_dir(self.git_dir), "info")
        tmp = info + f".{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(f"{os.getpid()}\n{self.path}\n")
        os.replace(tmp, info)

    # -- the loop ------------------------------------------------------
    def loop(self) -> None:
        while True:
            now = time.monotonic()
            if self.terminated or not os.path.isdir(self.git_dir):
                self.stop()
            elif self.spare is None and self.code.stale():  # a waiting spare asks before it reads events
                self.stop()
            if not self.stopping and not self.jobs and now - self.last > self.idle_s:
                self.stop()
            if self.stopping and not self.jobs and self.spare is None:
                return
            if self.spare is None and not self.jobs and not self.ending and not self.stopping:
                self._fork_spare()
            waits = [j.kill_at - now for j in self.jobs.values() if j.kill_at is not None]
            waits += [at - now for at in self.ending.values()]
            timeout = max(0.0, min([self.idle_s - (now - self.last), 30.0, *waits]))
            fds = [self.wake_r]
            if self.spare is None:  # no spare waits on the socket and the code watch: the parent does
                fds += [self.sock] if not self.stopping else []
                fds += [self.code.fd] if self.code.fd >= 0 else []
            elif not self.spare.hung_up:
                fds.append(self.spare.ctl)
            fds += [j.conn for j in self.jobs.values() if not j.gone]
            fds += [j.report for j in self.jobs.values() if not j.said_all]
            fds += list(self.ending)
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                ready = []
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            if self.spare is not None and self.spare.ctl in ready:
                self._from_spare(self.spare, block=False)
            for job in list(self.jobs.values()):
                if job.report in ready:
                    self._report(job)
            self._reap()
            for job in list(self.jobs.values()):
                if job.conn in ready:
                    self._from_client(job)
                if job.kill_at is not None and time.monotonic() >= job.kill_at:
                    _kill(job.pid, signal.SIGKILL)
                    job.kill_at = None
            self._ended(ready)
            if self.spare is None and not self.stopping and self.sock in ready:
                self._accept()

    def stop(self) -> None:
        """Serve nothing more: the socket goes at once (the next client starts a new server), a
        waiting spare is told to end; the commands running finish."""
        if self.stopping:
            return
        self.stopping = True
        try:
            os.unlink(self.path)
        except OSError:
            pass
        self.sock.close()
        os.close(self.lock)  # the socket path is free: a new server may take it while these commands end
        self.lock = -1
        self._quit_spare()

    def _quit_spare(self) -> None:
        spare = self.spare
        if spare is None or spare.told_quit:
            return
        spare.told_quit = True
        try:
            spare.ctl.send(cmdclient.pack([b"quit"]), socket.MSG_DONTWAIT)  # it is never in the middle of a message
        except OSError:
            _kill(spare.pid, signal.SIGKILL)  # it cannot hear: nothing of a command has begun in it

    # -- the spare -----------------------------------------------------
    def _fork_spare(self) -> None:
        """Fork the child that takes the next command; it warms itself and waits on the socket."""
        if self.spare_failures >= SPARE_FAILURES:
            return
        ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        self.pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the spare: never returns
            ctl.close()
            os.close(report_r)
            _spare(self, theirs, report_w)
        theirs.close()
        os.close(report_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        self.spare = Spare(pid, ctl, report_r)

    def _from_spare(self, spare: Spare, block: bool) -> None:
        """The spare's messages: questions the parent answers, or ``run`` (it took a command)."""
        while self.spare is spare and not spare.hung_up:
            try:
                fields = spare.chan.receive(READ_TIMEOUT_S if block else 0.0)
            except BlockingIOError:
                return
            except (OSError, ValueError):
                fields = None
            if fields is None:  # it ended: _reap learns how
                spare.hung_up = True
                return
            self._answer_spare(spare, fields)

    def _answer_spare(self, spare: Spare, fields: list[bytes]) -> None:
        kind = fields[0] if fields else b""
        reply: list[bytes] | None = None
        if kind == b"run" and len(spare.chan.fds) == 1:  # it is a command now: the parent keeps the connection
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM, fileno=spare.chan.fds.pop())
            conn.setblocking(False)
            spare.chan.close()
            self.spare = None
            self.spare_failures = 0
            self._add_job(conn, spare.pid, spare.report, spare.watched)
            return
        if kind == b"served" and len(fields) == 1:  # it answered `git pf -h` itself, and waits again
            self.served += 1
            self.last = time.monotonic()
            self._touch()
            return
        if kind == b"status":
            reply = [b"status", *self._status()]
        elif kind == b"stop":
            reply = [b"stopping"]
        elif kind == b"code":  # events are waiting: the parent reads them and says
            reply = [b"stale" if self.code.stale() else b"fresh"]
        elif kind == b"watch" and len(fields) >= 2 and spare.watched is None:
            spare.watched = self.watches.before([os.fsdecode(a) for a in fields[2:]], os.fsdecode(fields[1]))
            reply = _hint_fields(spare.watched)
        if reply is None:  # not a question a spare asks
            _kill(spare.pid, signal.SIGKILL)
            spare.hung_up = True
            return
        try:
            spare.ctl.settimeout(READ_TIMEOUT_S)
            spare.chan.send(reply)
        except OSError:
            pass
        if reply[0] in (b"stopping", b"stale"):
            self.stop()

    def _warm_pages(self, lines: list[bytes]) -> None:
        """A command's ``warm`` lines: the pages it wrote, for the next spares to write first."""
        before = len(self.warm)
        for line in lines:
            parts = line.split()
            try:
                start, count = int(parts[1], 16), int(parts[2], 16)
            except (IndexError, ValueError):
                continue
            if len(self.warm) + count > MAX_WARM_PAGES:
                break
            self.warm.update(range(start, start + count))
        if len(self.warm) != before:
            self.warm_ranges = _ranges(sorted(self.warm))

    # -- commands the parent forks itself -----------------------------
    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            try:
                self._handle(conn)
            except Exception:
                conn.close()

    def _handle(self, conn) -> None:
        pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():
            _send(conn, [b"refuse", b"another user"])
            conn.close()
            return
        conn.setblocking(True)
        conn.settimeout(READ_TIMEOUT_S)
        fds: list[int] = []
        try:
            fields = _receive(conn, fds)
        except (OSError, ValueError):
            fields = None
        try:
            if not fields:
                _send(conn, [b"refuse", b"bad request"])
                return
            kind = fields[0]
            if kind == b"status":
                _send(conn, [b"status", *self._status()])
                return
            if kind == b"stop":
                _send(conn, [b"stopping"])
                self.stop()
                return
            if kind != b"run" or len(fields) < 6 or len(fds) != 3 or fields[1] != self.token or self.code.stale():
                stale = self.code.stale()
                if stale:
                    self.stop()
                _send(conn, [b"refuse", b"stale" if stale else b"another environment"])
                return
            try:
                request = Request(fields)
            except ValueError:
                _send(conn, [b"refuse", b"bad request"])
                return
            self._run(conn, request, fds, pid)
            fds = []
            conn = None
        finally:
            for fd in fds:
                os.close(fd)
            if conn is not None:
                conn.close()

    def _status(self) -> list[bytes]:
        rss = 0
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        rss = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        return [str(os.getpid()).encode(), os.fsencode(self.path), str(int(self.started)).encode(),
                str(self.served).encode(), str(len(self.jobs)).encode(), str(rss).encode(),
                str(self.idle_s).encode(), *self.watches.roots()]

    def _run(self, conn, request: Request, fds: list[int], peer: int) -> None:
        if cmdwatch.fs_root_arg(request.argv) is not None:
            self._settle()
        watched = self.watches.before(request.argv, request.cwd)
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        self.pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the command's child: never returns
            os.close(report_r)
            try:
                _detach(self)
            except BaseException:
                os._exit(1)
            _command(self, conn, fds, request, report_w, watched.hint(report_w) if watched is not None else None,
                     peer, None, learn=_learns(request, self.learned))
        os.close(report_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        conn.setblocking(False)
        self._add_job(conn, pid, report_r, watched)

    def _settle(self) -> None:
        """Reap the commands that said they are exiting: their clients have their status, and a
        snapshot that follows one of the same sandbox must find its watch free, with the token of
        the stat cache it saved (else it walks everything)."""
        for job in list(self.jobs.values()):
            if not job.said_all:
                os.set_blocking(job.report, False)
                self._report(job)
            if _exiting(job.said):
                try:
                    os.waitid(os.P_PID, job.pid, os.WEXITED | os.WNOWAIT)  # it is ending; _reap collects it
                except ChildProcessError:
                    pass
        self._reap()

    def _add_job(self, conn, pid: int, report: int, watched) -> None:
        self.jobs[pid] = Job(conn, pid, report, watched)
        self.served += 1
        self.last = time.monotonic()
        self._touch()

    def _from_client(self, job: Job) -> None:
        """A forwarded signal, or the client went away: its command's process group ends."""
        try:
            data = job.conn.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            job.gone = True
            job.said += _drain(job.report)
            if not _exiting(job.said):  # else it had ended: its client has the status
                _kill(job.pid, signal.SIGTERM)
                job.kill_at = time.monotonic() + KILL_GRACE_S
            return
        job.reader.buf += data
        while len(job.reader.buf) >= 4:
            n = int.from_bytes(job.reader.buf[:4], "big")
            if n > 64 or len(job.reader.buf) < 4 + n:
                if n > 64:
                    job.reader.buf = b""
                return
            try:
                fields = cmdclient.unpack(job.reader.buf[4:4 + n])
            except ValueError:
                fields = []
            job.reader.buf = job.reader.buf[4 + n:]
            if len(fields) == 2 and fields[0] == b"signal" and fields[1].isdigit() \
                    and int(fields[1]) in cmdclient.FORWARDED:
                _kill(job.pid, int(fields[1]))

    def _ended(self, ready: list) -> None:
        """Let go of the connections of ended commands whose clients hung up (they have their
        status and are gone), or that waited ``LINGER_S``."""
        now = time.monotonic()
        for conn, until in list(self.ending.items()):
            gone = now >= until
            if conn in ready:
                try:
                    gone = gone or not conn.recv(4096)  # a signal forwarded late: ignored
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
            if gone:
                del self.ending[conn]
                conn.close()

    def _report(self, job: Job) -> None:
        """Read what a command wrote to its report pipe so far (it may write more than a pipe holds)."""
        try:
            chunk = os.read(job.report, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if chunk:
            job.said += chunk
        else:
            job.said_all = True

    def _reap(self) -> None:
        while self.jobs or self.spare is not None:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            spare = self.spare
            if spare is not None and pid == spare.pid:
                self._from_spare(spare, block=True)  # a last message (``run``) may wait on its socket
                if self.spare is spare:  # it ended without taking a command
                    self.spare = None
                    spare.chan.close()
                    os.close(spare.report)
                    self.watches.after(spare.watched, b"")
                    if not (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0):
                        self.spare_failures += 1
                    continue
            job = self.jobs.pop(pid, None)
            if job is None:
                continue
            os.set_blocking(job.report, False)
            report = job.said + _drain(job.report)
            os.close(job.report)
            lines = report.split(b"\n")
            refused = b"refuse" in lines
            self.watches.after(job.watched, report)
            code = os.waitstatus_to_exitcode(status)
            if refused:
                self.stop()  # pf.server is off now: the client runs the command itself
            elif not job.gone and not (code >= 0 and _exiting(report)):  # it told the client itself
                try:
                    job.conn.setblocking(True)
                    job.conn.settimeout(READ_TIMEOUT_S)
                    _send(job.conn, [b"exit", str(code).encode()] if code >= 0 else [b"signal", str(-code).encode()])
                except OSError:
                    pass
            if job.gone:
                job.conn.close()
            else:
                job.conn.setblocking(False)
                self.ending[job.conn] = time.monotonic() + LINGER_S
            self.last = time.monotonic()
            # after the client has its status: what the command taught is learnt, delaying no one
            for line in lines:
                if line.startswith(b"learned "):
                    kind = line[len(b"learned "):].decode("ascii", "replace")
                    self.learned[kind] = self.learned.get(kind, 0) + 1
            self._warm_pages([line for line in lines if line.startswith(b"warm ")])
            preload([line[len(b"import "):].decode("ascii", "replace") for line in lines
                     if line.startswith(b"import ") and _preloadable(line[len(b"import "):].decode("ascii", "replace"),
                                                                     heavy=False)])


def _exiting(report: bytes) -> bool:
    """Whether a command's report says it ended and sends its client the status itself."""
    return report.startswith(b"exiting ") or b"\nexiting " in report


def _ranges(pages: list[int]) -> list[tuple[int, int]]:
    """Sorted page numbers as (first page, count) runs."""
    out: list[tuple[int, int]] = []
    for p in pages:
        if out and out[-1][0] + out[-1][1] == p:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


def _hint_fields(watched) -> list[bytes]:
    """The parent's answer to a spare's ``watch``: what ``watched`` lets the snapshot skip."""
    if watched is None:
        return [b"hint"]
    token = b"%d %d %d" % watched.token if watched.token is not None else b""
    fields = [b"hint", watched.root, token, *sorted(watched.dirty)]
    if token and sum(len(f) + 4 for f in fields) > cmdclient.MAX_MESSAGE // 2:
        fields = [b"hint", watched.root, b""]  # too much to say: that snapshot walks
    return fields


def _kill(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except OSError:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def _drain(fd: int) -> bytes:
    out = b""
    os.set_blocking(fd, False)
    while True:
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return out
        if not chunk:
            return out
        out += chunk


def _send(conn, fields: list[bytes]) -> None:
    conn.sendall(cmdclient.pack(fields))


def _receive(conn, fds: list[int]) -> list[bytes] | None:
    """One request and the descriptors that came with it (into ``fds``, to be closed by the caller)."""
    data, anc, _, _ = conn.recvmsg(65536, socket.CMSG_SPACE(3 * 4))
    for level, kind, payload in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(payload) // 4
            fds += list(struct.unpack(f"{n}i", payload[:n * 4]))
    reader = cmdclient.Reader(conn)
    reader.buf = data
    if not data:
        return None
    return reader.message()


class Different(Exception):
    """The client's process differs from the server's in a way a forked child cannot copy."""


def _stat_id(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _ids(status: bytes) -> dict:
    return {line.split(b":")[0]: line.split()[1:] for line in status.splitlines() if line.startswith((b"Gid:", b"Groups:"))}


class Identity:
    """What a child compares with its client: its own namespaces, root directory, cgroup and
    groups (read once, before the request, by a spare)."""

    def __init__(self):
        self.spaces = [_stat_id(f"/proc/self/{p}") for p in _NAMESPACES]
        self.cgroup = _read("/proc/self/cgroup")
        self.ids = _ids(_read("/proc/self/status"))
        self.ahead: Ahead | None = None  # the repository a spare opened before its command came


def _become_peer(peer: int, me: Identity | None) -> None:
    """Take on the client's resource limits, CPU affinity and nice value; refuse (``Different``)
    what cannot be taken on: other namespaces, root, cgroup or groups."""
    me = me or Identity()
    theirs = [_stat_id(f"/proc/{peer}/{p}") for p in _NAMESPACES]
    if None in theirs or None in me.spaces or theirs != me.spaces:
        raise Different("namespaces")
    try:
        if _read(f"/proc/{peer}/cgroup") != me.cgroup:
            raise Different("cgroup")
        if _ids(_read(f"/proc/{peer}/status")) != me.ids:
            raise Different("groups")
        for which in _RLIMITS:
            want = resource.prlimit(peer, which)
            if want != resource.getrlimit(which):
                resource.setrlimit(which, want)
        os.sched_setaffinity(0, os.sched_getaffinity(peer))
        nice = os.getpriority(os.PRIO_PROCESS, peer)
        if nice != os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (OSError, ValueError) as e:
        raise Different(str(e)) from None


def _detach(server: Server, keep: tuple = ()) -> None:
    """In a freshly forked child: its own process group, death with the server, default signal
    handling, and none of the server's descriptors but those in ``keep``."""
    os.setpgid(0, 0)
    _libc().prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # the server dies: so do we
    if os.getppid() != server.pid:  # it died before that took effect
        os._exit(1)
    signal.set_wakeup_fd(-1)
    for sig in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_DFL)
    for fd in [server.wake_r, server.wake_w, server.lock] + [j.report for j in server.jobs.values()]:
        if fd >= 0:
            os.close(fd)
    if server.sock not in keep:
        server.sock.close()
    if server.code.fd >= 0 and server.code.fd not in keep:
        os.close(server.code.fd)
    server.watches.close_fds()
    for conn in [j.conn for j in server.jobs.values()] + list(server.ending):
        conn.close()


class Ahead:
    """The server's repository as a spare opened it before its command came (``_open_ahead``),
    with the config search paths it was opened under (its config files are those)."""

    def __init__(self, git, paths: tuple):
        self.git, self.paths = git, paths

    def usable(self) -> bool:
        """Whether the command may use it: its ``$HOME`` and ``$XDG_CONFIG_HOME`` name the same
        global and XDG config files (called after ``_fresh_git_search_path``)."""
        return _search_paths() == self.paths


def _search_paths() -> tuple:
    import pygit2
    from pygit2.enums import ConfigLevel

    try:
        return tuple(pygit2.settings.search_path[level] for level in (ConfigLevel.GLOBAL, ConfigLevel.XDG,
                                                                      ConfigLevel.SYSTEM))
    except Exception:
        return (None,)  # never equal to another such answer: nothing is used ahead


def _open_ahead(git_dir: str) -> Ahead | None:
    """In a spare, before it waits: the server's repository opened, every pack index read, and
    the current branch's newest ``AHEAD_IMAGES`` images read once along first parents (commit,
    root tree, manifest), and its commits up to ``AHEAD_COMMITS``. What that leaves is keyed by object id, which never goes stale: the
    mapped packs, libgit2's objects and the parsed manifests (``image.manifest.AHEAD``); and the
    pages that reading writes are this process's already, not copied on the command's time. The
    command reads refs and config afresh through it (libgit2 reads a ref's file on each lookup,
    and a config file again once it changed) and looks packs up again on a miss (a pack written
    since, or repacked). None when it cannot be opened."""
    import pygit2

    from ..image import manifest as img, refs

    try:
        git = pygit2.Repository(git_dir)
        ahead = Ahead(git, _search_paths())
        git.odb.exists(pygit2.Oid(raw=b"\xff" * 20))  # a miss: every pack's index is opened (not the zero id:
        # libgit2 answers that one without looking)
    except Exception:
        return None
    try:
        branch = refs.current_branch(git)
        oid = refs.branch_tip(git, branch) if branch else None
        for _ in git.walk(oid) if oid else ():  # a walk opens the commit-graph file
            break
        for i in range(AHEAD_COMMITS if oid else 0):
            commit = git.get(oid)
            if not isinstance(commit, pygit2.Commit):
                break
            if i < AHEAD_IMAGES:
                img.read_ahead(git, commit.tree_id.raw)
            if not commit.parent_ids:
                break
            oid = commit.parent_ids[0]
    except Exception:
        pass  # an image that does not parse: the command says so
    return ahead


def _warm(ranges: list[tuple[int, int]]) -> None:
    """Copy now the pages commands write (``Server.warm``), those still private and writable
    here: the command that comes then takes no copy-on-write fault for them."""
    if not ranges:
        return
    import ctypes

    page = os.sysconf("SC_PAGE_SIZE")
    maps = _writable_maps(page)
    libc, i = _libc(), 0
    for lo, hi in maps:  # both sorted: clip each run to the mappings
        while i < len(ranges) and ranges[i][0] + ranges[i][1] <= lo:
            i += 1
        j = i
        while j < len(ranges) and ranges[j][0] < hi:
            a, b = max(ranges[j][0], lo), min(ranges[j][0] + ranges[j][1], hi)
            if libc.madvise(a * page, (b - a) * page, _MADV_POPULATE_WRITE) != 0 and \
                    ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS):
                return  # a kernel before 5.14: commands take their faults
            j += 1


def _writable_maps(page: int) -> list[tuple[int, int]]:
    """This process's private writable mappings (first page, end page), but the stack's."""
    out = []
    with open("/proc/self/maps", "rb") as f:
        for line in f:
            parts = line.split()
            if len(parts) < 2 or not parts[1].startswith(b"rw") or parts[1][3:4] != b"p":
                continue
            if len(parts) > 5 and parts[5].startswith(b"[") and parts[5] != b"[heap]":
                continue
            lo, hi = (int(x, 16) for x in parts[0].split(b"-"))
            out.append((lo // page, hi // page))
    return out


def _learn(report_w: int, kind: str) -> None:
    """Report the pages this command wrote (private now, and present): spares warm them."""
    page = os.sysconf("SC_PAGE_SIZE")
    both = (1 << 63) | (1 << 56)  # present, exclusively mapped
    out = [b"learned %s\n" % kind.encode("ascii", "replace")]
    try:
        fd = os.open("/proc/self/pagemap", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        pages = []
        for lo, hi in _writable_maps(page):
            entries = array.array("Q")
            entries.frombytes(os.pread(fd, (hi - lo) * 8, lo * 8))
            pages += [lo + i for i, v in enumerate(entries) if v & both == both]
    except OSError:
        return
    finally:
        os.close(fd)
    out += [b"warm %x %x\n" % r for r in _ranges(pages[:MAX_WARM_PAGES])]
    try:
        os.write(report_w, b"".join(out))
    except OSError:
        pass


def _spare(server: Server, sock, report_w: int) -> None:
    """The spare child: warms itself, then waits on the listening socket; a command it takes
    it runs (``_command``, never returns). It ends when told to (``quit``) or when the
    server's code changed."""
    try:
        _detach(server, keep=(server.sock, server.code.fd))
        ctl = Channel(sock)
        _warm(server.warm_ranges)
        me = Identity()
        learned = server.learned
        me.ahead = _open_ahead(server.git_dir)
        while True:
            conn = _next_client(server, ctl)
            if conn is None:
                os._exit(0)
            _take(server, ctl, conn, report_w, me, learned)
    except BaseException:
        os._exit(1)


def _ask(ctl, fields: list[bytes]) -> list[bytes] | None:
    """Ask the parent; its answer, or None (told to quit, or no answer)."""
    try:
        ctl.send(fields)
        answer = ctl.receive(ASK_TIMEOUT_S)
    except (OSError, ValueError):
        return None
    return None if not answer or answer[0] == b"quit" else answer


def _code_fresh(server: Server, ctl) -> bool | None:
    """Whether git-pf's files are as this spare loaded them: True, False (stale), or None (the
    parent said to quit). Events the spare sees waiting it has the parent judge."""
    if not server.code.pending():
        return True
    answer = _ask(ctl, [b"code"])
    return None if answer is None else answer[0] == b"fresh"


def _next_client(server: Server, ctl):
    """Wait for the next client; its connection, or None when this spare is to end."""
    while True:
        if ctl.waiting():  # told to quit
            return None
        fds = [server.sock, ctl.sock] + ([server.code.fd] if server.code.fd >= 0 else [])
        try:
            ready, _, _ = select.select(fds, [], [])
        except InterruptedError:
            continue
        if ctl.sock in ready:  # told to quit, or the parent is gone
            return None
        if server.code.fd in ready and not _code_fresh(server, ctl):
            return None
        if server.sock in ready:
            try:
                conn, _ = server.sock.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                return None
            return conn


def _take(server: Server, ctl, conn, report_w: int, me: Identity, learned: dict) -> None:
    """One connection in the spare: answered here (status, refusals) and then it waits for the
    next one, or a command it runs and never returns."""
    fds: list[int] = []
    try:
        pid, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
        if uid != os.getuid():
            _send(conn, [b"refuse", b"another user"])
            return
        conn.setblocking(True)
        conn.settimeout(READ_TIMEOUT_S)
        try:
            fields = _receive(conn, fds)
        except (OSError, ValueError):
            fields = None
        if not fields:
            _send(conn, [b"refuse", b"bad request"])
            return
        kind = fields[0]
        if kind in (b"status", b"stop"):
            answer = _ask(ctl, [kind])
            if answer is None:
                os._exit(0)
            _send(conn, answer)
            if kind == b"stop":
                os._exit(0)
            return
        fresh = _code_fresh(server, ctl)
        if fresh is None:
            os._exit(0)
        if not fresh:
            _send(conn, [b"refuse", b"stale"])
            os._exit(0)
        try:
            request = Request(fields) if kind == b"run" and len(fields) >= 6 and len(fds) == 3 else None
        except ValueError:
            _send(conn, [b"refuse", b"bad request"])
            return
        if request is None or fields[1] != server.token:
            _send(conn, [b"refuse", b"another environment"])
            return
        if request.argv in HELP_ARGS and _help(server, ctl, conn, request, fds):
            return
        hint = None
        if cmdwatch.fs_root_arg(request.argv) is not None:
            answer = _ask(ctl, [b"watch", os.fsencode(request.cwd), *map(os.fsencode, request.argv)])
            if answer is None:
                os._exit(0)
            if len(answer) >= 3:  # no token yet: this snapshot walks, and says which stat cache it saved
                token = tuple(int(x) for x in answer[2].split()) if answer[2] else None
                hint = cmdwatch.Hint(answer[1], token, frozenset(answer[3:]), report_w)
        ctl.send([b"run"], [conn.fileno()])  # the parent watches the client from now on
        ctl.close()
        server.sock.close()
        if server.code.fd >= 0:
            os.close(server.code.fd)
        taken, fds = fds, []
        _command(server, conn, taken, request, report_w, hint, pid, me, learn=_learns(request, learned))
    except (OSError, ValueError):
        pass
    finally:
        for fd in fds:
            os.close(fd)
        conn.close()


def _learns(request: Request, learned: dict) -> bool:
    """Whether this command reports the pages it wrote: the first few of each served kind."""
    kind = request.argv[0] if request.argv else ""
    return kind in cmdclient.SERVED and learned.get(kind, 0) < LEARN_PER_KIND


def _command(server: Server, conn, fds, request: Request, report_w: int, hint, peer: int, me: Identity | None,
             learn: bool = False) -> None:
    """The command's child: becomes the client's command, runs it, and exits with its status."""
    code, started = 1, False
    try:
        try:
            _become_peer(peer, me)
        except Different:
            _send(conn, [b"refuse", b"another process context"])
            os._exit(0)
        signal.signal(signal.SIGINT, signal.SIG_IGN if request.sigint_ignored else signal.default_int_handler)
        os.chdir(request.cwd)
        _take_environment(request.env)
        os.umask(request.umask)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        _fresh_stdio()
        _fresh_git_search_path()
        import pygit2

        from .. import repo as repo_mod

        ahead = me.ahead.git if me is not None and me.ahead is not None and me.ahead.usable() else None
        try:
            found = pygit2.discover_repository(os.environ.get("GIT_PF_REPO") or ".")
            same = ahead is not None and found is not None and os.path.realpath(found) == os.path.realpath(ahead.path)
            if not enabled(ahead if same else pygit2.Repository(found)):
                os.write(report_w, b"refuse\n")
                _send(conn, [b"refuse", b"pf.server is off"])
                os._exit(0)
        except Exception:
            pass  # not a repository here, or its config is bad: the command says so
        del pygit2
        repo_mod.AHEAD = ahead  # ``Repo.open`` takes it where it opens that repository
        cmdwatch.HINT = hint
        known = set(sys.modules)
        from .. import cli

        cmdclient.IN_SERVER = True
        sys.argv = ["git-pf", *request.argv]
        _send(conn, [b"started"])
        started = True
        try:
            cli.main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        _report_imports(known, report_w)
        if learn:
            _learn(report_w, request.argv[0] if request.argv else "")
    except BaseException as e:  # the server's own failure, not the command's
        if not started:  # nothing ran: the client runs the command itself
            try:
                _send(conn, [b"refuse", b"setup failed"])
            except BaseException:
                pass
            os._exit(0)
        try:
            os.write(2, f"git pf: internal error in the command server: {type(e).__name__}: {e}\n".encode())
        except BaseException:
            pass
        code = 70
    _finish(conn, report_w, code & 0xFF)


def _take_environment(env: dict) -> None:
    """Make ``os.environ`` exactly ``env``, touching only what differs (most of a client's
    environment is the server's: each change is a ``putenv`` or ``unsetenv``)."""
    for name in [k for k in os.environ if k not in env]:
        del os.environ[name]
    for name, value in env.items():
        if os.environ.get(name) != value:
            os.environ[name] = value


def _finish(conn, report_w: int, code: int) -> None:
    """End the command: every descriptor it had is closed first (its files and locks are let go
    of, as at a process's exit), then the client gets the exit status from here, without a
    wait for the parent; the parent reports only a death by signal (``exiting`` says which)."""
    try:
        os.write(report_w, b"exiting %d\n" % code)
    except OSError:
        pass
    keep = conn.fileno()
    os.closerange(0, keep)
    os.closerange(keep + 1, 1 << 20)
    try:
        _send(conn, [b"exit", str(code).encode()])
        # this process's exit (freeing its memory) would take a CPU from the client reading its
        # status: it comes once the client has hung up
        select.select([conn], [], [], LINGER_S)
    except BaseException:
        pass
    os._exit(code)


def _columns(env: dict, out: int) -> int:
    """The client's terminal width as ``shutil.get_terminal_size`` finds it: ``COLUMNS``, else
    its stdout's (``out``), else 80. Help is wrapped at min(width, 80) - 2."""
    try:
        columns = int(env["COLUMNS"])
    except (KeyError, ValueError):
        columns = 0
    if columns <= 0:
        try:
            columns = os.get_terminal_size(out).columns
        except (OSError, ValueError):
            columns = 0
    return columns or 80


def _help(server: Server, ctl: Channel, conn, request: Request, fds: list[int]) -> bool:
    """``git pf -h`` answered by the spare from the text made at start-up: written to the client's
    stdout with nothing of the command machinery run, so the spare stays clean and waits for the
    next client. False where the command must run: another width, or no text."""
    if server.help is None or _columns(request.env, fds[1]) < HELP_COLUMNS:
        return False
    _send(conn, [b"started"])
    view, code = memoryview(server.help), 0
    while view:
        try:
            view = view[os.write(fds[1], view):]
        except OSError as e:  # a stdout that fails half-way: as the command would say it
            code = _failed_write(e, fds[1], fds[2])
            break
    try:
        ctl.send([b"served"])
    except OSError:
        pass
    for fd in fds:
        os.close(fd)
    fds.clear()
    _send(conn, [b"exit", str(code).encode()])
    return True


def _failed_write(e: OSError, out: int, err: int) -> int:
    """The exit status (and line on ``err``) of a command whose write to ``out`` failed with ``e``."""
    import io

    from . import app

    saved = sys.stdout, sys.stderr
    sys.stdout = io.TextIOWrapper(io.FileIO(out, "wb", closefd=False), write_through=True)
    sys.stderr = io.TextIOWrapper(io.FileIO(err, "wb", closefd=False), errors="backslashreplace", write_through=True)
    try:
        return app._broken_pipe(e) if isinstance(e, BrokenPipeError) else app._os_error(e)
    except BaseException:
        return 1
    finally:
        sys.stdout, sys.stderr = saved


def render_help() -> bytes | None:
    """``git pf -h`` at a width of ``HELP_COLUMNS``, as a command's child writes it; made once
    at start-up in a child of its own (the parent never runs a command); None when it fails
    or exits with another status than 0."""
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(r)
            os.dup2(w, 1)
            os.environ["COLUMNS"] = str(HELP_COLUMNS)
            _fresh_stdio()
            from . import app

            code = app.main(["-h"])
            sys.stdout.flush()
        except BaseException:
            code = 1
        os._exit(code & 0xFF)
    os.close(w)
    out = []
    while True:
        chunk = os.read(r, 1 << 16)
        if not chunk:
            break
        out.append(chunk)
    os.close(r)
    _, status = os.waitpid(pid, 0)
    return b"".join(out) if os.waitstatus_to_exitcode(status) == 0 else None


def _light(name: str) -> bool:
    """git-pf's own modules, its light dependencies and the standard library."""
    top = name.partition(".")[0]
    return top in LIGHT_DEPENDENCIES or (top in sys.stdlib_module_names and top not in ("tkinter", "idlelib", "turtle"))


def _preloadable(name: str, heavy: bool = True) -> bool:
    """A module the parent may import because a command imported it: a light one (``_light``),
    never the kernels, mounts or integrations, and the model layer's only when the command
    loaded nothing heavy (``heavy`` false: no torch came with it)."""
    if name.startswith(("git_pf.kernels", "git_pf.mount", "git_pf.integrations")):
        return False
    if heavy and name.startswith("git_pf.layers.model"):
        return False
    return _light(name)


def _report_imports(known: set, report_w: int) -> None:
    """Tell the parent what this command imported that it had not: it imports them too, so the
    next command of this kind finds them loaded."""
    loaded = set(sys.modules) - known
    heavy = not all(_light(n) for n in loaded)
    new = sorted(n for n in loaded if _preloadable(n, heavy) and n.isascii() and n.isprintable() and " " not in n)
    if new:
        try:
            os.write(report_w, "".join(f"import {n}\n" for n in new[:500]).encode())
        except OSError:
            pass


def preload(names) -> None:
    """Import ``names`` in the parent, then freeze what it holds (``gc.freeze``): a child's garbage
    collections never walk, and so never copy, the parent's objects."""
    import gc
    import importlib

    loaded = False
    for name in names:
        if name in sys.modules:
            continue
        loaded = True
        try:
            importlib.import_module(name)
        except BaseException:  # a module that fails to import here fails in the command too
            pass
    if loaded:
        gc.freeze()


class Built:
    """The Typer application with its click command built once, in the parent (40 ms a command)."""

    def __init__(self, app):
        import typer.main

        self.app, self.command = app, typer.main.get_command(app)

    def __call__(self, *args, **kwargs):
        return self.command(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.app, name)


def _fresh_stdio() -> None:
    """New ``sys.stdin/stdout/stderr`` on descriptors 0-2, buffered as at an interpreter's start
    (line-buffered on a terminal)."""
    import io

    enc = sys.stdout.encoding if sys.stdout else "utf-8"
    sys.stdin = io.TextIOWrapper(io.open(0, "rb", closefd=False), encoding=enc, errors="strict")
    sys.stdout = io.TextIOWrapper(io.open(1, "wb", closefd=False), encoding=enc, errors="strict",
                                  line_buffering=os.isatty(1))
    sys.stderr = io.TextIOWrapper(io.open(2, "wb", closefd=False), encoding=enc, errors="backslashreplace",
                                  line_buffering=True)
    sys.__stdin__, sys.__stdout__, sys.__stderr__ = sys.stdin, sys.stdout, sys.stderr  # terminal size, isatty


def _fresh_git_search_path() -> None:
    """libgit2 found the global and XDG config files from the server's ``$HOME`` when it loaded;
    the command's ``$HOME`` and ``$XDG_CONFIG_HOME`` decide them now."""
    import pygit2
    from pygit2.enums import ConfigLevel

    for level in (ConfigLevel.GLOBAL, ConfigLevel.XDG, ConfigLevel.SYSTEM):
        try:
            pygit2.settings.search_path[level] = None
        except Exception:
            pass


def main() -> None:
    """``python -c "from git_pf.cli.server import main; main()" GIT_DIR``: serve that repository."""
    if len(sys.argv) != 2:
        sys.exit(2)
    git_dir = os.path.realpath(sys.argv[1])
    server = Server(git_dir)
    try:
        if not server.setup():
            return
    except OSError as e:
        if e.errno in (errno.EADDRINUSE, errno.EACCES, errno.ENOENT, errno.ENOSPC, errno.EROFS):
            return
        raise
    try:
        preload(PRELOAD)
        app_module = sys.modules.get("git_pf.cli.app")
        if app_module is not None:
            app_module.app = Built(app_module.app)
        server.help = render_help()
        import gc

        gc.collect()
        gc.freeze()  # see preload
        server.loop()
    finally:
        server.stop()
        server.close()
