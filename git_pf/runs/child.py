"""Running the agent under record, replay or run: start CMD, wait, stop it when told.

``start`` runs CMD with the proxy's environment (CMD not found: exit 127,
not executable: 126, as a shell says it). ``wait`` polls the child and a
stop event (set by the proxy on a replay mismatch, or by the channel
watcher on a divergence); when it is set the child gets SIGTERM, then
SIGKILL after a grace period. A child killed by signal S exits 128 + S, as a
shell reports it. ``isolated`` wraps CMD so that it runs in a private mount
namespace (util-linux ``unshare``, then ``mount --bind``) where the path a run
was recorded in shows the replay's world, in the recorded cwd; where
namespaces are not available it refuses, unless told not to isolate.
Touches no repository.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path
from typing import Callable

from ..core.errors import PfError

GRACE_S = 3.0
POLL_S = 0.02
# In the new namespace: the world over the recorded path, the recorded cwd, then the agent (same pid).
_ENTER = ('mount --bind -- "$1" "$2" || exit 125; [ -z "$3" ] || cd -- "$3" || exit 125; shift 3; exec "$@"')
_namespaces: dict[str, bool] = {}


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


def _unshare() -> list[str]:
    opts = ["unshare", "--mount", "--propagation", "private"]
    return opts + (["--map-root-user"] if os.geteuid() != 0 else []) + ["--"]


def namespaces_available() -> bool:
    """Whether this process can start a child in a private mount namespace of its own (checked once)."""
    if "ok" not in _namespaces:
        try:
            ok = shutil.which("unshare") is not None and subprocess.run(
                [*_unshare(), "sh", "-c", 'mount --bind -- / / 2>/dev/null; mount --make-private / 2>/dev/null; true'],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        _namespaces["ok"] = ok
    return _namespaces["ok"]


def check_isolation(root: str | None, isolate: bool = True) -> None:
    """Refuse (PfError, exit 2) before anything is written when the recorded path ``root`` exists
    here, must be hidden, and no mount namespace can be made."""
    if root and isolate and os.path.isdir(root) and not namespaces_available():
        raise PfError(f"the run was recorded in '{root}', outside this world, and no private mount namespace can "
                      f"be made here to show the world there (give --no-isolate to run anyway: writes by that "
                      f"path would reach it)", 2)


def isolated(cmd: list[str], world: Path, root: str | None, cwd: str | None, isolate: bool = True) -> list[str]:
    """CMD as it must start so that the recorded sandbox path ``root`` shows ``world`` (and its cwd
    is the recorded one): wrapped in a mount namespace, or as it is when there is nothing to hide
    (no recorded path, the same path, a recorded path that is gone, ``isolate`` False). Raises
    PfError (exit 2) when the path must be hidden and no namespace can be had."""
    if not root or not isolate or not os.path.isdir(root):
        return list(cmd)
    if os.path.realpath(root) == os.path.realpath(world):
        return list(cmd)
    check_isolation(root, isolate)
    start_check(cmd, os.environ)
    here = cwd if cwd and os.path.isdir(cwd) else ""
    return [*_unshare(), "sh", "-c", _ENTER, "sh", str(world), os.path.realpath(root), here, *cmd]
