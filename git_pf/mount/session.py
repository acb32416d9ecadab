"""One FUSE session: mount, the request loop on the FUSE device, unmount.

The daemon talks to the kernel directly (docs/mount.md "Request loop"):
``fusermount3`` mounts and hands back the ``/dev/fuse`` descriptor, and one
thread reads each request into a buffer kept for the session, looks up the
handler by opcode, and writes the reply with one ``writev``. A handler gets
the request's node id and argument bytes and returns the reply payload (one
buffer, or a list of them sent as they are, or ``None`` for requests the
kernel expects no answer to); an ``OSError`` is answered with its errno,
any other error with ``EIO`` and a log line. A handler may also answer
``Later``: a reply thread computes the payload and sends it while the loop
serves the next request (reads of large files, decoded on every core).
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
import platform
import socket
import struct
import subprocess
import threading
import time
from concurrent import futures
from concurrent.futures import ThreadPoolExecutor

from git_pf.core.errors import PfError

from . import protocol as P

log = logging.getLogger("git_pf.mount")

MAX_WRITE = 1024 * 1024  # largest write (and read) request: 256 pages
BUFFER = MAX_WRITE + 4096  # a whole write request: header, write_in, data
SPIN_S = 100e-6  # after a request, look for the next one this long before sleeping on the device
CROWD_EVERY_S = 0.01  # how often the loop looks whether the machine has an idle core to spin on
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
REPLY_WAIT_S = 10.0  # at unmount, how long answers still being computed may take
DRAIN_POLL_MS = 20  # while stopping: how often to look whether the helpers have ended
SLICE_NS = 100_000  # the fair scheduler's shortest slice, asked for the loop and the reply threads
SCHED_SETATTR = {"x86_64": 314, "aarch64": 274, "riscv64": 274, "ppc64le": 355, "s390x": 345}  # syscall numbers


def reply_threads() -> int:
    """Threads that compute ``Later`` answers: one per core this process may run on, at least two."""
    return max(2, CORES)


def short_slice() -> bool:
    """Ask the fair scheduler for its shortest slice (``SLICE_NS``) for the calling thread and the
    threads it starts from now on; whether the kernel took it. Linux 6.12 and later let a task
    with a shorter slice preempt the running one when it wakes up, so on a busy machine a
    request (an ``isatty`` of a reader) is answered as soon as it comes instead of after the
    slice of whatever else runs on that core. No privilege is needed, the thread's nice value
    and policy stay as they are (only ``SCHED_OTHER`` threads ask), and a kernel that does not
    know the field ignores it."""
    number = SCHED_SETATTR.get(platform.machine())
    if number is None or os.sched_getscheduler(0) != os.SCHED_OTHER:
        return False
    import ctypes

    # struct sched_attr (first version, 48 bytes): size policy flags nice priority runtime deadline period
    attr = ctypes.create_string_buffer(struct.pack("<IIQiIQQQ", 48, os.SCHED_OTHER, 0,
                                                   os.getpriority(os.PRIO_PROCESS, 0), 0, SLICE_NS, 0, 0), 48)
    try:
        return ctypes.CDLL(None, use_errno=True).syscall(ctypes.c_long(number), ctypes.c_long(0), attr,
                                                         ctypes.c_long(0)) == 0
    except (OSError, AttributeError):
        return False


class Later:
    """A handler's answer that a reply thread computes and sends, while the loop serves the
    next request: a read of a large file, decoded on another core. ``fn()`` gives the
    payload and may not take the session's lock or wait for another request's answer."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn


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
        self.replies: ThreadPoolExecutor | None = None  # the reply threads (``Later``)
        self._unsent: set = set()  # their answers not sent yet
        self._poller = None
        self._crowd, self._crowd_at = False, -1.0

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
        """Detach the mount unless the kernel already ended the session, then drop the device once
        the answers still being sent are out (a stuck one keeps it open until the process exits)."""
        if self.fd < 0:
            return
        for helper in self.helpers:  # after an unmount nothing they write can block
            helper.stop()
        if not self._poll(0) & select.POLLERR:
            subprocess.run(["fusermount3", "-u", "-z", "--", self.mountpoint], capture_output=True)
        if self.replies is not None:  # answers still being sent write to this descriptor: let them end first
            self.replies.shutdown(wait=False)
            _, late = futures.wait(self._unsent.copy(), timeout=REPLY_WAIT_S)
            if late:  # stuck (a chunk that never comes): the descriptor stays open until the process exits,
                log.warning("%d answers still pending at unmount", len(late))  # so its number is never reused
                self.fd = -1
                return
        os.close(self.fd)
        self.fd = -1

    # -- serving --------------------------------------------------------
    def _poll(self, timeout_ms: int) -> int:
        if self._poller is None:
            self._poller = select.poll()
            self._poller.register(self.fd, select.POLLIN)
        return sum(ev for _, ev in self._poller.poll(timeout_ms))

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
        if not short_slice():  # the reply threads, started from this one, inherit the slice
            log.debug("the fair scheduler's short slice is not available: requests wait for the running task's slice")
        buf = bytearray(BUFFER)
        view = memoryview(buf)
        fd, unpack, handlers, lock, counts = self.fd, P.IN_HEADER.unpack_from, self.handlers, self.lock, self.counts
        spin, answered = False, 0.0  # spin before sleeping on the device? when the last answer went
        while not (self.stopping and self._done()):
            if self.stopping and not self._poll(0):
                continue
            if self.idle is not None:
                self._idle()
            caught = spin and not self._unsent and not any(helper.working() for helper in self.helpers) \
                and not self._crowded() and self._spin()
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
            # spin before the next request when this one came soon enough for a spin to catch it
            # (after a sleep the gap includes the wake-up: allowed for with another SPIN_S)
            spin = caught or time.perf_counter() - answered < 2 * SPIN_S
            _, opcode, unique, nodeid, *_ = unpack(buf)
            counts[opcode] = counts.get(opcode, 0) + 1
            if opcode == P.IOCTL:  # no file of a mount is a terminal (isatty asks): answered at once
                with lock:
                    self._reply_error(unique, errno.ENOTTY)
                answered = time.perf_counter()
                continue
            with lock:
                self._answer(opcode, unique, nodeid, handlers.get(opcode), view[P.IN_HEADER.size:n])
            if self.after is not None:
                self.after()
            answered = time.perf_counter()
            if opcode == P.DESTROY:
                break

    def _crowded(self) -> bool:
        """Whether more threads are ready to run than there are cores, so a spin would take a
        core from one of them (read from the kernel's count, at most every ``CROWD_EVERY_S``)."""
        now = time.perf_counter()
        if now - self._crowd_at >= CROWD_EVERY_S:
            self._crowd_at = now
            try:
                with open("/proc/loadavg", "rb") as f:  # "0.52 0.58 0.59 2/345 1234": 2 runnable
                    self._crowd = int(f.read().split()[3].split(b"/")[0]) > CORES
            except (OSError, ValueError, IndexError):
                self._crowd = False
        return self._crowd

    def _spin(self) -> bool:
        """Look for the next request for up to ``SPIN_S``; whether one came.

        A program walking files sends its next request a few microseconds after an
        answer; a daemon asleep on the device is woken by the kernel, which on an idle
        virtual machine costs tens of microseconds per request (docs/mount.md). The loop
        spins only while requests come that soon (a program that takes longer between
        requests, or a machine too busy to run it at once, would only lose the core to
        the spin), and not while a helper works: storing files ahead of a reader saves it
        more than the spin would, and the spin would take the core and the GIL from it, nor
        while a reply thread still computes an answer (a large file's reads come queued: the
        spin would only take a core and the GIL from the threads copying the answers), nor
        while more threads are ready to run than there are cores (``_crowded``): on a busy
        machine a process woken on the device costs no more than a switch, and the spin
        would take the core from the very program that sends the requests."""
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            if self._poll(0):
                return True
        return False

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
        out = self._call(opcode, unique, fn, nodeid, body)
        if type(out) is Later:
            if self.replies is None:
                self.replies = ThreadPoolExecutor(reply_threads(), thread_name_prefix="reply")
            sent = self.replies.submit(self._answer_later, opcode, unique, out.fn)
            self._unsent.add(sent)
            sent.add_done_callback(self._unsent.discard)
        elif out is not None:
            self._reply(unique, out)

    def _call(self, opcode: int, unique: int, fn, *args):
        """``fn(*args)``; None once the error it raised has been answered."""
        try:
            return fn(*args)
        except OSError as e:
            self._reply_error(unique, e.errno or errno.EIO)
        except PfError as e:
            log.error("request %d: %s", opcode, e.message)
            self._reply_error(unique, errno.EIO)
        except Exception as e:  # a bug or damaged data: the caller sees EIO, the log says why
            log.exception("request %d failed: %s", opcode, e)
            self._reply_error(unique, errno.EIO)
        return None

    def _answer_later(self, opcode: int, unique: int, fn) -> None:
        """On a reply thread: compute a ``Later`` answer and send it."""
        try:
            out = self._call(opcode, unique, fn)
            if out is not None:
                self._reply(unique, out)
        except OSError as e:  # the mount went away meanwhile: nobody waits for the answer
            log.debug("reply to request %d not sent: %s", opcode, e)

    def _init(self, nodeid: int, body) -> bytes:
        reply, flags = P.init_reply(body, MAX_WRITE, self.max_background)
        log.debug("FUSE session started (flags %#x)", flags)
        return reply

    def _reply(self, unique: int, out) -> None:
        """Answer with ``out``: one buffer, or a list of them (pieces of a read, not joined)."""
        try:
            if isinstance(out, list):
                os.writev(self.fd, [P.OUT_HEADER.pack(P.OUT_HEADER.size + sum(map(len, out)), 0, unique), *out])
            else:
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
