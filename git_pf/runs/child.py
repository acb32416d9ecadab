"""Running the agent under record, replay or run: start CMD, wait, stop it when told.

``start`` runs CMD with the proxy's environment (CMD not found: exit 127,
not executable: 126, as a shell says it). ``wait`` polls the child and a
stop event (set by the proxy on a replay mismatch, or by the channel
watcher on a divergence); when it is set the child gets SIGTERM, then
SIGKILL after a grace period. A child killed by signal S exits 128 + S, as a
shell reports it. Touches no repository.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable

from ..errors import PfError

GRACE_S = 3.0
POLL_S = 0.02


class ChildNotStarted(PfError):
    """CMD could not be started (its code is the shell's: 127 not found, 126 not executable)."""


def start_check(cmd: list[str], env) -> None:
    """Refuse a missing command before anything is written."""
    if not cmd:
        raise PfError("give the command to run after '--'", 2)
    exe = cmd[0]
    if os.sep not in exe and shutil.which(exe, path=env.get("PATH")) is None:
        raise ChildNotStarted(f"{exe}: command not found", 127)
    if os.sep in exe and not os.path.exists(exe):
        raise ChildNotStarted(f"{exe}: No such file or directory", 127)


def start(cmd: list[str], env: dict[str, str], cwd: Path | None = None, output=None) -> subprocess.Popen:
    """Start CMD; ``output`` (a file or ``subprocess.DEVNULL``) takes its stdout and stderr instead of ours."""
    start_check(cmd, env)
    exe = cmd[0]
    try:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=output, stderr=output)
    except FileNotFoundError:
        raise ChildNotStarted(f"{exe}: command not found", 127) from None
    except PermissionError:
        raise ChildNotStarted(f"{exe}: permission denied", 126) from None
    except OSError as e:
        raise ChildNotStarted(f"{exe}: {e.strerror or e}", 126) from None


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


def wait(proc: subprocess.Popen, stop: threading.Event, tick: Callable[[], None] = lambda: None) -> int:
    """Wait for the child (calling ``tick`` between polls); stop it when ``stop`` is set. Its exit code."""
    try:
        while True:
            tick()
            if stop.is_set():
                return _stop(proc)
            try:
                return exit_code(proc.wait(POLL_S))
            except subprocess.TimeoutExpired:
                pass
    except BaseException:  # an interrupt: the child does not outlive us
        _stop(proc)
        raise


def _stop(proc: subprocess.Popen) -> int:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
    return exit_code(proc.wait())
