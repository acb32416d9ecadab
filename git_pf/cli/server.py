"""The command server of one repository (docs/server.md): a pre-imported parent that runs
each ``git pf`` command a client hands it in a forked child.

The parent imports the CLI, pygit2 and the command implementations once and
never runs a command itself; each child changes to the client's directory,
environment and umask, takes its stdin/stdout/stderr, resets its signal
handlers and runs the Typer application, so nothing of one command (config,
signals, working directory, errors) reaches the next. It listens on a 0600
unix socket (``cli.client.socket_path``), answers only its own user
(``SO_PEERCRED``), kills a command's process group when its client goes away,
keeps a file watcher per snapshotted sandbox (``layers.world.watch``), and ends when idle
for ``pf.server.idleTimeout``, when ``pf.server`` is turned off, when its own
installed files change (a new server starts on the next command), on ``git pf
server stop`` and on SIGTERM. Reads the repository's config; writes only its
socket, lock and info files.
"""
from __future__ import annotations

import errno
import fcntl
import os
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
READ_TIMEOUT_S = 5.0  # a client must send its whole request within this
_PR_SET_PDEATHSIG = 1
MAX_SERVERS = 8  # per user: a new server stops the one idle longest beyond this
# What the parent loads before it forks: the CLI and what the served commands run.
LIGHT_DEPENDENCIES = frozenset({"git_pf", "typer", "click", "pygit2", "zstandard", "pathspec", "pyfastcdc", "xattr",
                                "_cffi_backend", "cffi"})
PRELOAD = ("git_pf.cli.app", "git_pf.cli.commands", "git_pf.repo", "git_pf.ops.snapshot", "git_pf.image.history",
           "git_pf.ops.diff", "git_pf.merge", "git_pf.ops.checkout", "git_pf.ops.fsck", "git_pf.image.verify", "git_pf.ops.fork",
           "git_pf.layers.world.capture", "git_pf.layers.world.statcache", "git_pf.store.sidestore",
           "git_pf.transport.lazy", "git_pf.runs.stepworld", "typer._click.decorators", "typer._click._textwrap")


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
    """Notices a change to git-pf's installed files (a reinstall, an edit): the server is stale."""

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


class Job:
    """One command running in a child: its client connection and process."""

    def __init__(self, conn, pid: int, report: int, watched):
        self.conn, self.pid, self.report, self.watched = conn, pid, report, watched
        self.reader = cmdclient.Reader(conn)
        self.kill_at: float | None = None  # SIGKILL deadline once the client is gone
        self.gone = False


class Server:
    def __init__(self, git_dir: str):
        self.git_dir = git_dir
        self.token = cmdclient.token()
        self.jobs: dict[int, Job] = {}
        self.watches = cmdwatch.Watches(os.fsencode(git_dir))
        self.stopping = False
        self.last = time.monotonic()
        self.started = time.time()
        self.served = 0

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
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        self._write_info()
        self._register()
        return True

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
            if self.code.stale() or not os.path.isdir(self.git_dir):
                self.stop()
            if not self.jobs and (self.stopping or now - self.last > self.idle_s):
                return
            waits = [j.kill_at - now for j in self.jobs.values() if j.kill_at is not None]
            timeout = max(0.0, min([self.idle_s - (now - self.last), 30.0, *waits]))
            fds = [self.wake_r] + ([self.sock] if not self.stopping else [])
            fds += [j.conn for j in self.jobs.values() if not j.gone]
            if self.code.fd >= 0:
                fds.append(self.code.fd)
            try:
                ready, _, _ = select.select(fds, [], [], timeout)
            except InterruptedError:
                ready = []
            if self.wake_r in ready:
                try:
                    os.read(self.wake_r, 4096)
                except BlockingIOError:
                    pass
            self._reap()
            for job in list(self.jobs.values()):
                if job.conn in ready:
                    self._from_client(job)
                if job.kill_at is not None and time.monotonic() >= job.kill_at:
                    _kill(job.pid, signal.SIGKILL)
                    job.kill_at = None
            if not self.stopping and self.sock in ready:
                self._accept()

    def stop(self) -> None:
        """Serve nothing more: the socket goes at once (the next client starts a new server);
        the commands running finish."""
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
            self._run(conn, fields, fds, pid)
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

    def _run(self, conn, fields: list[bytes], fds: list[int], peer: int) -> None:
        cwd, umask, flags = fields[2], int(fields[3]), fields[4]
        argc = int(fields[5])
        argv = [os.fsdecode(a) for a in fields[6:6 + argc]]
        env = {}
        for item in fields[6 + argc:]:
            k, sep, v = item.partition(b"=")
            if sep and k:
                env[os.fsdecode(k)] = os.fsdecode(v)
        watched = self.watches.before(argv, os.fsdecode(cwd))
        report_r, report_w = os.pipe2(os.O_CLOEXEC)
        self.pid = os.getpid()
        pid = os.fork()
        if pid == 0:  # the command's child: never returns
            os.close(report_r)
            _child(self, conn, fds, argv, env, os.fsdecode(cwd), umask, b"i" in flags, report_w, watched, peer)
        os.close(report_w)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass
        for fd in fds:
            os.close(fd)
        conn.setblocking(False)
        self.jobs[pid] = Job(conn, pid, report_r, watched)
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

    def _reap(self) -> None:
        while self.jobs:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            job = self.jobs.pop(pid, None)
            if job is None:
                continue
            report = _drain(job.report)
            os.close(job.report)
            refused = b"refuse" in report.split(b"\n")
            self.watches.after(job.watched, report)
            if refused:
                self.stop()  # pf.server is off now: the client runs the command itself
            elif not job.gone:
                code = os.waitstatus_to_exitcode(status)
                try:
                    job.conn.setblocking(True)
                    job.conn.settimeout(READ_TIMEOUT_S)
                    _send(job.conn, [b"exit", str(code).encode()] if code >= 0 else [b"signal", str(-code).encode()])
                except OSError:
                    pass
            job.conn.close()
            self.last = time.monotonic()
            # after the client has its status: importing what the command loaded delays no one
            preload([line[len(b"import "):].decode("ascii", "replace") for line in report.split(b"\n")
                     if line.startswith(b"import ") and _preloadable(line[len(b"import "):].decode("ascii", "replace"))])


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


def _same(path: str, peer: int) -> bool:
    """Whether ``/proc/PEER/<path>`` and ``/proc/self/<path>`` name the same thing."""
    try:
        a, b = os.stat(f"/proc/{peer}/{path}"), os.stat(f"/proc/self/{path}")
    except OSError:
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def _become_peer(peer: int) -> None:
    """Take on the client's resource limits, CPU affinity and nice value; refuse (``Different``)
    what cannot be taken on: other namespaces, root, cgroup or groups."""
    import resource

    if not all(_same(p, peer) for p in ("ns/mnt", "ns/pid", "ns/user", "ns/net", "root")):
        raise Different("namespaces")
    try:
        if _read(f"/proc/{peer}/cgroup") != _read("/proc/self/cgroup"):
            raise Different("cgroup")
        ids = {line.split(b":")[0]: line.split()[1:] for line in _read(f"/proc/{peer}/status").splitlines()
               if line.startswith((b"Gid:", b"Groups:"))}
        mine = {line.split(b":")[0]: line.split()[1:] for line in _read("/proc/self/status").splitlines()
                if line.startswith((b"Gid:", b"Groups:"))}
        if ids != mine:
            raise Different("groups")
        for name in dir(resource):
            if name.startswith("RLIMIT_"):
                which = getattr(resource, name)
                want = resource.prlimit(peer, which)
                if want != resource.getrlimit(which):
                    resource.setrlimit(which, want)
        os.sched_setaffinity(0, os.sched_getaffinity(peer))
        nice = os.getpriority(os.PRIO_PROCESS, peer)
        if nice != os.getpriority(os.PRIO_PROCESS, 0):
            os.setpriority(os.PRIO_PROCESS, 0, nice)
    except (OSError, ValueError) as e:
        raise Different(str(e)) from None


def _child(server: Server, conn, fds, argv, env, cwd, umask, sigint_ignored, report_w, watched, peer) -> None:
    """The forked child: becomes the client's command, runs it, and exits with its status."""
    code, started = 1, False
    try:
        os.setpgid(0, 0)
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)  # the server dies: so do we
        if os.getppid() != server.pid:  # it died before that took effect
            os._exit(1)
        signal.set_wakeup_fd(-1)
        for sig in (signal.SIGCHLD, signal.SIGHUP, signal.SIGTERM):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_IGN if sigint_ignored else signal.default_int_handler)
        for fd in [server.wake_r, server.wake_w, server.lock] + [j.report for j in server.jobs.values()]:
            if fd >= 0:
                os.close(fd)
        server.sock.close()
        if server.code.fd >= 0:
            os.close(server.code.fd)
        server.watches.close_fds()
        for job in server.jobs.values():
            job.conn.close()
        try:
            _become_peer(peer)
        except Different:
            _send(conn, [b"refuse", b"another process context"])
            os._exit(0)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        os.umask(umask)
        for i, fd in enumerate(fds):
            os.dup2(fd, i)
            os.close(fd)
        _fresh_stdio()
        _fresh_git_search_path()
        import pygit2

        try:
            if not enabled(pygit2.Repository(pygit2.discover_repository(os.environ.get("GIT_PF_REPO") or "."))):
                os.write(report_w, b"refuse\n")
                _send(conn, [b"refuse", b"pf.server is off"])
                os._exit(0)
        except Exception:
            pass  # not a repository here, or its config is bad: the command says so
        del pygit2
        cmdwatch.HINT = watched.hint(report_w) if watched is not None else None
        known = set(sys.modules)
        from .. import cli

        cmdclient.IN_SERVER = True
        sys.argv = ["git-pf", *argv]
        _send(conn, [b"started"])
        started = True
        conn.close()
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
    os._exit(code & 0xFF)


def _preloadable(name: str) -> bool:
    """A module the parent may import because a command imported it: git-pf's own (not the
    model or kernel code, which loads torch), its light dependencies and the standard library."""
    top = name.partition(".")[0]
    if name.startswith(("git_pf.kernels", "git_pf.layers.model", "git_pf.mount", "git_pf.integrations")):
        return False
    return top in LIGHT_DEPENDENCIES or (top in sys.stdlib_module_names and top not in ("tkinter", "idlelib", "turtle"))


def _report_imports(known: set, report_w: int) -> None:
    """Tell the parent what this command imported that it had not: it imports them too, so the
    next command of this kind finds them loaded."""
    new = sorted(n for n in set(sys.modules) - known if _preloadable(n) and n.isascii() and " " not in n)
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
        import gc

        gc.collect()
        gc.freeze()  # see preload
        server.loop()
    finally:
        server.stop()
        server.close()
