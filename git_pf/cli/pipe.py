"""A closed standard output (``git pf log | head -1``): end quietly, as git does.

git dies of SIGPIPE when its reader goes away: no message, exit status 141
(128 + SIGPIPE) in the shell. ``closed_stdout`` tells that case apart from a
broken pipe to a child process (a real failure); ``quiet_exit`` points
stdout at /dev/null so that Python's final flush cannot print anything.
Standard library only: the entry point imports it.
"""
from __future__ import annotations

import os
import select
import signal
import sys

EXIT_CLOSED_PIPE = 128 + signal.SIGPIPE  # 141, as the shell reports git killed by SIGPIPE


def closed_stdout() -> bool:
    """Whether stdout is a pipe (or socket) whose reading end is gone."""
    try:
        poll = select.poll()
        poll.register(sys.stdout.fileno(), select.POLLOUT)
        return any(events & select.POLLERR for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # no stdout, or not a real file
        return False


def quiet_exit() -> int:
    """Drop what is still buffered for the closed stdout and give git's exit status."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
    except (OSError, ValueError, AttributeError):
        pass
    return EXIT_CLOSED_PIPE


def write(text: str) -> int:
    """Print ``text`` and flush it at once, so a closed pipe shows here, not at exit."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:
        return quiet_exit()
    return 0
