"""The mount daemon: start one, serve it, pause it for a snapshot, stop it cleanly.

``start`` forks a daemon (or serves in the foreground), which mounts
(``session``), records its pid in ``mount.json`` and only then reports
ready, so ``git pf mount`` returns once the directory works. One daemon
serves one mountpoint; N fork mounts are N daemons sharing the git object
database and the side store. A control socket lets ``git pf snapshot
--mount`` hold the request loop still while it reads the upper layer, then
switch the mount to the new image and empty the upper layer before any other
request runs.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time

from git_pf.mount import mounts
from git_pf.core.errors import DataError, PfError, UsageError
from git_pf.mount.snapshot import clear_upper
from git_pf.mount.mounts import MountState

READY_TIMEOUT = 60.0
FREEZE_TIMEOUT = 120.0  # a snapshot that has not answered by then is abandoned; the mount carries on
READ_AHEAD = 8 * 1024 * 1024  # kernel read-ahead window of a mount (requests stay at most 1 MiB)
MAX_BACKGROUND = 64  # read-ahead requests the kernel may have in flight at once
SIGNALS = (signal.SIGTERM, signal.SIGINT)  # end the session cleanly

log = logging.getLogger("git_pf.mount")


def options(git_dir: str, state: MountState) -> list[str]:
    """Mount options; the fsname names the repository, so ``umount DIR`` finds it from DIR alone."""
    opts = ["default_permissions", f"fsname={mounts.fsname(git_dir)}", "subtype=pf"]
    return opts + ["ro"] if state.mode == "ro" else opts


class Daemon:
    def __init__(self, git_dir: str, state: MountState):
        from git_pf.repo import Repo

        from .lower import Lower
        from .ops import Operations
        from .upper import Upper
        from .view import View

        self.state = state
        self.git_dir = git_dir
        self.repo = Repo.open(git_dir)
        _attach_lazy_fetch(self.repo)
        self._Lower, self._View = Lower, View
        upper = None
        if state.mode == "rw":
            shutil.rmtree(state.dir / "tmp", ignore_errors=True)
            upper = Upper(os.fsencode(state.upper), os.fsencode(state.dir / "tmp"))
        self.ops = Operations(View(Lower(self.repo.git, self.repo.store, state.image), upper))
        self.control: socket.socket | None = None
        self.session = None

    # -- control --------------------------------------------------------
    def listen(self) -> None:
        self.control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.control.bind(self.state.control)
        self.control.listen(4)
        threading.Thread(target=self._accept, daemon=True, name="control").start()

    def _accept(self) -> None:
        while True:
            conn, _ = self.control.accept()
            conn.settimeout(FREEZE_TIMEOUT)
            try:
                f = conn.makefile("rwb")
                req = json.loads(f.readline() or b"{}")
                if req.get("op") == "freeze":
                    with self.session.lock:
                        self._frozen(f)
                elif req.get("op") == "stats":
                    stored = self.ops.prefill.stored if self.ops.prefill is not None else 0
                    chunks = self.ops.view.lower.chunks
                    _reply(f, {"ok": True, "requests": dict(self.session.counts), "prefilled": stored,
                               "listed_ahead": self.ops.listed_ahead,
                               "chunks": {"mapped": chunks.mapped, "decoded": chunks.decoded}})
                else:
                    _reply(f, {"ok": req.get("op") == "ping", "pid": os.getpid(), "error": "unknown request"})
            except Exception as e:  # a broken client never takes the mount down
                log.warning("control request failed: %s", e)
            finally:
                conn.close()

    def _frozen(self, f) -> None:
        """Runs holding the session's lock, so no FUSE request is served until it returns."""
        _reply(f, {"ok": True, "image": self.state.image})
        try:
            req = json.loads(f.readline() or b"{}")
        except (OSError, ValueError):
            log.warning("snapshot client went away; carrying on")
            return
        if req.get("op") != "switch":
            _reply(f, {"ok": True})
            return
        try:
            self.switch(req["image"], {os.fsencode(k) for k in req.get("keep", ())})
        except Exception as e:
            log.exception("switching to the new image failed")
            _reply(f, {"ok": False, "error": f"switching to the new image failed: {e}"})
            return
        _reply(f, {"ok": True})

    def switch(self, image: str, keep: set[bytes] = frozenset()) -> None:
        """Follow ``image`` (which holds the upper layer's changes) and empty the upper layer, but for
        ``keep``: the paths the snapshot's ignore rules left out of the image."""
        lower = self._Lower(self.repo.git, self.repo.store, image)
        self.state.image = image
        self.state.save(durable=True)
        upper = self.ops.view.upper
        self.ops.follow(self._View(lower, upper))  # the upper layer is valid over the new image too
        if upper is not None:
            try:
                clear_upper(self.state, set(self.ops.open_paths()) | keep)
            finally:
                upper.reload()
        log.info("now following image %s", image)

    # -- lifecycle ------------------------------------------------------
    def run(self, ready) -> None:
        from .session import Session

        self.session = Session(self.ops.handlers(), self.state.mountpoint, options(self.git_dir, self.state), MAX_BACKGROUND,
                               idle=(self.ops.idle_ready, self.ops.idle_step))
        self.session.mount()
        if self.ops.readonly:
            from .prefill import Prefill

            self.ops.prefill = Prefill(self.session.fd)
            self.session.helpers.append(self.ops.prefill)
            self.session.after = self.ops.prefill.release
        self.state.pid = os.getpid()
        self.state.save()
        self.listen()
        threading.Thread(target=self._when_served, args=(ready,), daemon=True, name="ready").start()
        for sig in SIGNALS:
            signal.signal(sig, lambda *_: self.session.terminate())
        try:
            self.session.serve()
        finally:
            self.session.close()
            self.finish()

    def _when_served(self, ready) -> None:
        """Report ready once the kernel has finished its handshake and the root answers."""
        try:
            os.stat(self.state.mountpoint)
            _raise_readahead(self.state.mountpoint)
        finally:
            ready()

    def finish(self) -> None:
        """After a clean unmount: drop the state unless an upper layer holds changes."""
        if self.state.mode == "ro" or mounts.upper_is_empty(self.state):
            mounts.discard(self.state)
        log.info("unmounted %s", self.state.mountpoint)


def _attach_lazy_fetch(repo) -> None:
    """Side-store objects missing here are fetched from the remote on first read
    (the transport is imported only when an object is actually missing)."""
    os.environ.setdefault("GIT_PF_QUIET", "1")

    def fetch(missing: list[str]) -> None:
        try:
            from git_pf.transport import lazy
        except ImportError:
            return
        lazy.Fetcher(repo)(missing)

    repo.store.fetcher = fetch


def _raise_readahead(mountpoint: str) -> None:
    """Let the kernel read ahead READ_AHEAD at a time (up to 8 requests of 1 MiB queued, not one
    of 128 KiB); only after the handshake, which sets the default (the INIT reply can only lower it)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            devs = [line.split()[2] for line in f if mounts.unescape(line.split()[4]) == mountpoint]
        if devs:
            with open(f"/sys/class/bdi/{devs[-1]}/read_ahead_kb", "w") as f:
                f.write(str(READ_AHEAD // 1024))
    except OSError:
        pass  # not allowed here: the kernel's default applies


def _reply(f, obj: dict) -> None:
    f.write(json.dumps(obj).encode() + b"\n")
    f.flush()


def _setup_logging(stream) -> None:
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)


def start(git_dir: str, state: MountState, foreground: bool = False) -> MountState:
    """Mount ``state`` and return once it is ready (or serve until unmounted in the foreground)."""
    if foreground:
        _setup_logging(sys.stderr)
        os.umask(0)
        Daemon(git_dir, state).run(lambda: print(f"mounted {state.image[:12]} at {state.mountpoint}", flush=True))
        return state
    from . import lower, ops, session  # noqa: F401  (loaded once, before the fork, for every daemon)

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # double fork: the daemon is nobody's child, so it never lingers as a zombie
        os.close(r)
        try:
            os.setsid()
            if os.fork() == 0:
                _child(git_dir, state, w)
        finally:
            os._exit(0)
    os.close(w)
    os.waitpid(pid, 0)
    return _wait_ready(r, state)


def _child(git_dir: str, state: MountState, w: int) -> None:
    code = 0
    try:
        os.umask(0)
        os.chdir("/")
        logfile = open(state.log, "a", buffering=1)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(logfile.fileno(), 1)
        os.dup2(logfile.fileno(), 2)
        sys.stdout = sys.stderr = logfile
        _setup_logging(logfile)
        daemon = Daemon(git_dir, state)

        def ready():
            os.write(w, b"ok %d\n" % os.getpid())
            os.close(w)

        daemon.run(ready)
    except BaseException as e:  # report to the waiting parent, then leave
        code = 1
        try:  # the exit code the parent gives: 3 for damaged image data, else 2
            exit_code = e.code if isinstance(e, PfError) else UsageError.code
            os.write(w, f"error {exit_code} {type(e).__name__}: {e}\n".encode())
        except OSError:
            pass
        logging.getLogger("git_pf.mount").exception("daemon failed")
    finally:
        os._exit(code)


def _wait_ready(r: int, state: MountState) -> MountState:
    deadline = time.monotonic() + READY_TIMEOUT
    data = b""
    import select

    while b"\n" not in data and time.monotonic() < deadline:
        ready, _, _ = select.select([r], [], [], 0.5)
        if ready:
            chunk = os.read(r, 4096)
            if not chunk:
                break
            data += chunk
    os.close(r)
    if data.startswith(b"ok "):
        state.pid = int(data.split()[1])
        return state
    code, _, msg = data.decode(errors="replace").strip().removeprefix("error ").partition(" ")
    code, msg = (int(code), msg) if code.isdigit() else (UsageError.code, f"{code} {msg}".strip())
    msg = f"cannot mount at '{state.mountpoint}': {msg or 'the daemon did not start in time'} (log: {state.log})"
    raise (DataError if code == DataError.code else UsageError)(msg, code)
