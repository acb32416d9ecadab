"""Whether a process named by its pid still runs, and whether it may be the one that wrote something.

Mount records name their daemon's pid; leftovers of killed processes (transfer
scratch repositories, checkout temp directories, side-store temp files) carry
their writer's pid in their names. ``pid_alive`` says whether a pid runs (a
zombie does not); ``may_have_written`` also tells a reused pid apart: a process
started after the thing was last written cannot have written it. Linux
``/proc`` only; reads, never writes, and sends no signal but 0.
"""
from __future__ import annotations

import os

_START_MARGIN = 2.0  # seconds: the boot time in /proc/stat is whole seconds


def pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is not alive
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def may_have_written(pid: int, written: float) -> bool:
    """True when process ``pid`` runs and was started before ``written`` (an mtime), so it may be
    the writer of what was last written then; True too when its start time cannot be read."""
    if pid == os.getpid():
        return True
    if not pid_alive(pid):
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            ticks = int(f.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/stat", "rb") as f:
            boot = next(int(line.split()[1]) for line in f if line.startswith(b"btime "))
    except (OSError, ValueError, IndexError, StopIteration):
        return True  # cannot tell: take it as the writer
    return boot + ticks / os.sysconf("SC_CLK_TCK") <= written + _START_MARGIN
