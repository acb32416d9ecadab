"""Holding SIGINT / SIGTERM back over a few steps that must finish together.

``Deferred`` swaps the Python handlers of those signals for one that only
records the signal; ``end`` puts the old handlers back and then acts on a
recorded signal as the old handler would have (for ``git-pf``: a
``KeyboardInterrupt``, so the command still ends with one line). Only the
main thread can change handlers: elsewhere it does nothing. Touches no file
and no other process.
"""
from __future__ import annotations

import os
import signal
import threading

_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Deferred:
    def __init__(self) -> None:
        self._old: dict[int, object] | None = None
        self._caught: list[int] = []

    def start(self) -> None:
        """From now on a SIGINT or SIGTERM waits for ``end``."""
        if self._old is not None or threading.current_thread() is not threading.main_thread():
            return
        self._old = {sig: signal.getsignal(sig) for sig in _SIGNALS}
        for sig in _SIGNALS:
            signal.signal(sig, lambda signum, frame: self._caught.append(signum))

    def end(self) -> None:
        """Restore the handlers, then deliver the first signal that came meanwhile."""
        if self._old is None:
            return
        old, self._old = self._old, None
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if not self._caught:
            return
        sig = self._caught[0]
        handler = old[sig]
        if callable(handler):
            handler(sig, None)
        elif handler == signal.SIG_DFL:
            os.kill(os.getpid(), sig)
