"""The request loop of a mount daemon: pyfuse3's main loop on trio, minus most scheduler passes.

pyfuse3 reaches trio only through its module attribute ``pyfuse3.trio``;
``install`` swaps in a thin stand-in that delegates everything to trio
except two steps on the per-request path, each of which cost a whole trio
scheduler pass (about as much as the request itself):

* the read lock is taken without a checkpoint when it is free;
* waiting for the next request first asks the FUSE device, without
  blocking, whether one is already queued (the usual case while a program
  works through many files: the release of one file and the open of the
  next arrive together) and takes it at once; only an empty queue, or
  ``MAX_STREAK`` requests in a row, goes through trio's own wait, so
  callbacks queued from other threads (control socket, SIGTERM) still run
  between requests.

Every handler of the mount is synchronous, so one worker task serves all
requests (``main(max_tasks=1)``); more tasks would only add scheduler passes.
Touches nothing but pyfuse3's reference to trio.
"""
from __future__ import annotations

import select

MAX_STREAK = 64  # requests taken in a row without a scheduler pass


class _Lock:
    """The read lock: taken without yielding when free (trio's ``Lock`` always yields once)."""

    def __init__(self):
        self._held = False
        self._freed = None  # a trio.Event while some task waits for the lock

    async def __aenter__(self):
        while self._held:  # only with several worker tasks, which ``run`` does not start
            import trio

            if self._freed is None:
                self._freed = trio.Event()
            await self._freed.wait()
        self._held = True

    async def __aexit__(self, *exc):
        self._held = False
        if self._freed is not None:
            self._freed.set()
            self._freed = None


class _Lowlevel:
    """``trio.lowlevel`` with a ``wait_readable`` that skips the scheduler when a request is queued."""

    def __init__(self, low):
        self._low = low
        self._poll: select.poll | None = None
        self._fd = -1
        self._streak = 0

    def __getattr__(self, name):
        return getattr(self._low, name)

    async def wait_readable(self, fd):
        if self._streak < MAX_STREAK:
            if fd != self._fd:
                self._poll, self._fd = select.poll(), fd
                self._poll.register(fd, select.POLLIN)
            if self._poll.poll(0):
                self._streak += 1
                return
        self._streak = 0
        await self._low.wait_readable(fd)


class _Trio:
    """What pyfuse3 sees as ``trio``."""

    def __init__(self, trio):
        self._trio = trio
        self.lowlevel = _Lowlevel(trio.lowlevel)
        self.Lock = _Lock

    def __getattr__(self, name):
        return getattr(self._trio, name)


def install() -> None:
    import pyfuse3
    import trio

    if not isinstance(pyfuse3.trio, _Trio):
        pyfuse3.trio = _Trio(trio)


def run() -> None:
    """Serve requests until the session ends (after ``pyfuse3.init``)."""
    import pyfuse3
    import trio

    install()
    trio.run(pyfuse3.main, 1, 1)
