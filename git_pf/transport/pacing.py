"""How many downloads run at once: found by measuring, not fixed.

More parallel transfers help a server that serves each connection at a capped
rate (object stores, CDNs, the large Git LFS hosts) and hurt one that shares
one CPU among them (a single-process server such as giftless under its own
WSGI server, where parallel streams fight over one interpreter lock). So
``paced`` starts with one transfer and doubles the number while each step
raises the total rate by at least a sixth, up to the configured most (git-lfs's
``lfs.concurrenttransfers``); a step that does not pay is undone and the
number stays. Runs caller work in threads; touches nothing itself.
"""
from __future__ import annotations

import time
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

GAIN = 7 / 6  # a step must raise the total rate this much to be kept
WINDOW = 0.5  # seconds a step is measured at least


def paced(work, items: list, pace: "Pace", advance, weight) -> int:
    """``work(item)`` for every item, ``pace.limit`` at once; ``work`` returns the bytes it moved,
    which count towards the rate, and ``paced`` their sum. ``advance(weight(item))`` reports
    each finished item. One ``Pace`` may serve several calls: what it learnt stays."""
    total = 0
    todo = deque(items)
    running: dict = {}
    with ThreadPoolExecutor(pace.most) as pool:
        while todo or running:
            while todo and len(running) < pace.limit:
                item = todo.popleft()
                running[pool.submit(work, item)] = item
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                item = running.pop(future)
                moved = future.result()
                total += moved
                advance(weight(item))
                pace.finished(moved)
    return total


class Pace:
    """The number of transfers: 1, then doubled while the measured rate grows by ``GAIN``."""

    def __init__(self, most: int):
        self.most, self.limit = max(1, most), 1
        self.probing = self.most > 1
        self.before: float | None = None  # the rate at the previous number
        self._restart()

    def _restart(self) -> None:
        self.start, self.bytes, self.done = time.monotonic(), 0, 0

    def finished(self, nbytes: int) -> None:
        self.bytes += nbytes
        self.done += 1
        elapsed = time.monotonic() - self.start
        if not self.probing or self.done < max(2, self.limit) or elapsed < WINDOW:
            return
        rate = self.bytes / elapsed
        if self.before is not None and rate < GAIN * self.before:
            self.limit = max(1, self.limit // 2)  # the last step did not pay: undo it, and stay
            self.probing = False
            return
        if self.limit >= self.most:
            self.probing = False
            return
        self.before = rate
        self.limit = min(self.most, self.limit * 2)
        self._restart()
