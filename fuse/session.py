"""One FUSE session: mount, the request loop on the FUSE device, unmount.

The daemon talks to the kernel directly (docs/mount.md "Request loop"):
``fusermount3`` mounts and hands back the ``/dev/fuse`` descriptor, and one
thread reads each request into a buffer kept for the session, looks up the
handler by opcode, and writes the reply with one ``writev``. A handler gets
the request's node id and argument bytes and returns the reply payload (or
``None`` for requests the kernel expects no answer to); an ``OSError`` is
answered with its errno, any other error with ``EIO`` and a log line.
``lock`` is held while a request is served, so another thread that takes it
(a snapshot's freeze) holds the whole mount still. While no request waits,
the loop does the idle work it was given, a step at a time, looking for a
request between steps. Helper threads that write to the device
(``prefill``) are stopped with the session, which keeps answering requests
until they have ended (a helper may wait for an answer). Knows nothing of git.
"""
from __future__ import annotations

import errno
import logging
import os
import select
import socket
import subprocess
import threading
import time

from git_pf.errors import PfError

from . import protocol as P

log = logging.getLogger("git_pf.fuse")

MAX_WRITE = 1024 * 1024  # largest write (and read) request: 256 pages
BUFFER = MAX_WRITE + 4096  # a whole write request: header, write_in, data
SPIN_S = 100e-6  # after a request, look for the next one this long before sleeping on the device
DRAIN_POLL_MS = 20  # while stopping: how often to look whether the helpers have ended


class Terminated(Exception):
    """Raised by ``terminate`` into a loop that is waiting for the next request."""


class Session:
    def __init__(self, handlers: dict, mountpoint: str, options: list[str], max_background: int, idle=None):
        self.handlers = handlers  # opcode -> fn(nodeid, body) -> payload | None
        self.idle = idle  # (ready, step): work done while no request waits, one step at a time
        self.mountpoint, self.options, self.max_background = mountpoint, options, max_background
        self.fd = -1
        self.lock = threading.Lock()
        self.stopping = False
        self._waiting = False
        self.helpers: list = []  # objects with stop(), busy() and working(), stopped with the session
        self.after = None  # called once each request is answered: work that must follow the reply
        self.counts: dict[int, int] = {}  # requests served, by opcode

    # -- mount ----------------------------------------------------------
    def mount(self) -> None:
        """Mount through fusermount3, which passes the FUSE device back over a socket."""
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            env = dict(os.environ, _FUSE_COMMFD=str(theirs.fileno()))
            try:
                proc = subprocess.run(["fusermount3", "-o", ",".join(self.options), "--", self.mountpoint],
                                      env=env, pass_fds=(theirs.fileno(),), capture_output=True, text=True)
            except FileNotFoundError:
                raise OSError(errno.ENOENT, "fusermount3 is not installed (install the fuse3 package)") from None
            theirs.close()
            if proc.returncode != 0:
                raise OSError(errno.EIO, proc.stderr.strip() or f"fusermount3 failed ({proc.returncode})")
            _, fds, _, _ = socket.recv_fds(ours, 1, 1)
        finally:
            ours.close()
            theirs.close()
        if not fds:
            raise OSError(errno.EIO, "fusermount3 passed no FUSE device")
        self.fd = fds[0]
        os.set_inheritable(self.fd, False)

    def close(self) -> None:
        """Detach the mount unless the kernel already ended the session, then drop the device."""
        if self.fd < 0:
            return
        for helper in self.helpers:  # after an unmount nothing they write can block
            helper.stop()
        if not self._poll(0) & select.POLLERR:
            subprocess.run(["fusermount3", "-u", "-z", "--", self.mountpoint], capture_output=True)
        os.close(self.fd)
        self.fd = -1

    # -- serving --------------------------------------------------------
    def _poll(self, timeout_ms: int) -> int:
        p = select.poll()
        p.register(self.fd, select.POLLIN)
        return sum(ev for _, ev in p.poll(timeout_ms))

    def terminate(self) -> None:
        """End the loop (safe in a signal handler of the loop's thread): at once when it is
        waiting for a request, else once the request it serves is answered; in both cases
        only after the helpers have stopped."""
        if not self.stopping:
            self.stopping = True
            for helper in self.helpers:
                helper.stop()
        if self._waiting:
            raise Terminated()

    def _done(self) -> bool:
        """Stopping, and no helper left that may wait for a request to be answered."""
        if any(helper.busy() for helper in self.helpers):
            self._poll(DRAIN_POLL_MS)  # serve what a helper may wait for, or look again shortly
            return False
        return True

    def serve(self) -> None:
        """Serve requests until the mount goes away or ``terminate`` is called."""
        buf = bytearray(BUFFER)
        view = memoryview(buf)
        fd, unpack, handlers, lock, counts = self.fd, P.IN_HEADER.unpack_from, self.handlers, self.lock, self.counts
        while not (self.stopping and self._done()):
            if self.stopping and not self._poll(0):
                continue
            if self.idle is not None:
                self._idle()
            if not any(helper.working() for helper in self.helpers):
                self._spin()  # not while a helper has work: it needs the CPU (and the GIL) more
            try:
                self._waiting = True
                n = os.readv(fd, [buf])
                self._waiting = False
            except Terminated:
                self._waiting = False
                continue
            except OSError as e:
                self._waiting = False
                if e.errno in (errno.ENOENT, errno.EAGAIN):  # interrupted before we read it: nothing to answer
                    continue
                if e.errno == errno.ENODEV:  # unmounted
                    break
                raise
            _, opcode, unique, nodeid, *_ = unpack(buf)
            counts[opcode] = counts.get(opcode, 0) + 1
            with lock:
                self._answer(opcode, unique, nodeid, handlers.get(opcode), view[P.IN_HEADER.size:n])
            if self.after is not None:
                self.after()
            if opcode == P.DESTROY:
                break

    def _spin(self) -> None:
        """Look for the next request for a short while before sleeping on the device.

        A program walking files sends its next request a few microseconds after an
        answer; a daemon asleep on the device is woken by the kernel, which on an idle
        virtual machine costs tens of microseconds per request (docs/mount.md). Skipped
        while a helper works: storing files ahead of a reader saves it more than the
        spin would, and the spin would take the core and the GIL from the helper."""
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            if self._poll(0):
                return

    def _idle(self) -> None:
        ready, step = self.idle
        while not self.stopping and ready() and not self._poll(0):
            with self.lock:
                try:
                    step()
                except Exception as e:  # work ahead of requests: the request itself will report it
                    log.debug("idle work failed: %s", e)

    def _answer(self, opcode: int, unique: int, nodeid: int, fn, body) -> None:
        if opcode == P.INIT:
            fn = self._init
        if fn is None:
            if opcode not in P.NO_REPLY:
                self._reply_error(unique, errno.ENOSYS)
            return
        try:
            out = fn(nodeid, body)
        except OSError as e:
            self._reply_error(unique, e.errno or errno.EIO)
            return
        except PfError as e:
            log.error("request %d: %s", opcode, e.message)
            self._reply_error(unique, errno.EIO)
            return
        except Exception as e:  # a bug or damaged data: the caller sees EIO, the log says why
            log.exception("request %d failed: %s", opcode, e)
            self._reply_error(unique, errno.EIO)
            return
        if out is not None:
            self._reply(unique, out)

    def _init(self, nodeid: int, body) -> bytes:
        reply, flags = P.init_reply(body, MAX_WRITE, self.max_background)
        log.debug("FUSE session started (flags %#x)", flags)
        return reply

    def _reply(self, unique: int, out) -> None:
        try:
            os.writev(self.fd, [P.OUT_HEADER.pack(P.OUT_HEADER.size + len(out), 0, unique), out])
        except OSError as e:
            if e.errno != errno.ENOENT:  # ENOENT: the request was interrupted meanwhile
                raise

    def _reply_error(self, unique: int, code: int) -> None:
        try:
            os.write(self.fd, P.OUT_HEADER.pack(P.OUT_HEADER.size, -code, unique))
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
