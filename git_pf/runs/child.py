"""Running the agent under record, replay or run: start CMD, wait, stop it when told.

``start`` runs CMD with the proxy's environment (CMD not found: exit 127,
not executable: 126, as a shell says it). ``wait`` polls the child and a
stop event (set by the proxy on a replay mismatch, or by the channel
watcher on a divergence); when it is set the child gets SIGTERM, then
SIGKILL after a grace period. A child killed by signal S exits 128 + S, as a
shell reports it. ``isolated`` wraps CMD so that it runs in a private mount
namespace (util-linux ``unshare``, then ``mount --bind``) where the path a run
was recorded in shows the replay's world, in the recorded cwd, and where each
git directory outside the world that the world links to (``gitlinks``) is an
overlay whose upper layer is a tmpfs of that namespace, thrown away with it;
where namespaces are not available it refuses, unless told not to isolate.
Touches no repository.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
from pathlib import Path
from typing import Callable

from ..core.errors import PfError
from . import gitlinks

GRACE_S = 3.0
POLL_S = 0.02
# In the new namespace: a tmpfs for the overlays' upper layers, each linked git directory overlaid, the
# world over the recorded path, the recorded cwd, then the agent (same pid).
_ENTER = ('w=$1 r=$2 c=$3 t=$4 n=$5; shift 5; i=0; if [ "$n" -gt 0 ]; then '
          'mount -t tmpfs -o mode=700 pf-git "$t" || exit 125; fi; while [ "$i" -lt "$n" ]; do i=$((i+1)); '
          'mkdir -- "$t/u$i" "$t/w$i" && mount -t overlay -o "lowerdir=$1,upperdir=$t/u$i,workdir=$t/w$i" '
          'pf-git "$1" || exit 125; shift; done; [ -z "$r" ] || mount --bind -- "$w" "$r" || exit 125; '
          '[ -z "$c" ] || cd -- "$c" || exit 125; exec "$@"')
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


def start(cmd: list[str], env: dict[str, str], cwd: Path | None = None, output=None,
          group: bool = False) -> subprocess.Popen:
    """Start CMD; ``output`` (a file or ``subprocess.DEVNULL``) takes its stdout and stderr instead of ours;
    ``group``: in a process group of its own (``end_group`` ends what is left of it)."""
    start_check(cmd, env)
    exe = cmd[0]
    try:
        return subprocess.Popen(cmd, env=env, cwd=cwd, stdout=output, stderr=output, start_new_session=group)
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


def end_group(proc: subprocess.Popen) -> None:
    """Kill every process left in the group of a child started with ``group`` (it has exited)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # nothing left
        pass


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


def overlays_available(scratch: str) -> bool:
    """Whether an overlay can be mounted in such a namespace (Linux 5.11 or later lets a user
    namespace do it), tried once under ``scratch``, an empty directory of the caller's."""
    if "overlay" not in _namespaces:
        probe = ('mount -t tmpfs pf-git "$1" && mkdir "$1/l" "$1/u" "$1/w" && '
                 'mount -t overlay -o "lowerdir=$1/l,upperdir=$1/u,workdir=$1/w" pf-git "$1/l"')
        try:
            _namespaces["overlay"] = subprocess.run(
                [*_unshare(), "sh", "-c", probe, "sh", scratch], stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _namespaces["overlay"] = False
    return _namespaces["overlay"]


def check_isolation(root: str | None, isolate: bool = True, links=()) -> None:
    """Refuse (PfError, exit 2) before anything is written when the recorded path ``root`` exists
    here, must be hidden, and no mount namespace can be made; the same when one of the world's
    git ``links`` may name a git directory outside it (``gitlinks.outside_maybe``)."""
    if not isolate or namespaces_available():
        return
    if root and os.path.isdir(root):
        raise PfError(f"the run was recorded in '{root}', outside this world, and no private mount namespace can "
                      f"be made here to show the world there (give --no-isolate to run anyway: writes by that "
                      f"path would reach it)", 2)
    link = gitlinks.outside_maybe(tuple(links), root)
    if link is not None:
        raise PfError(f"the world's git link '{link.path}' may name a git directory outside it, and no private "
                      f"mount namespace can be made here to keep it from the agent's git commands (give "
                      f"--no-isolate to run anyway: they would change it)", 2)


def shown_at(world: Path, root: str | None) -> bool:
    """Whether an isolated child sees ``world`` at the recorded path ``root`` (a bind mount): a
    recorded path that is here and is not the world itself."""
    return bool(root) and os.path.isdir(root) and os.path.realpath(root) != os.path.realpath(world)


def git_dirs(world: Path, root: str | None, links=(), image: tuple | None = None) -> list[str]:
    """The git directories outside ``world`` that its git ``links`` name, resolved where an
    isolated child sees the world (at the recorded path ``root`` when ``shown_at``), to overlay
    (``gitlinks.private_dirs``). ``world``: the world checked out; with ``image`` (git, image id)
    the path where that image's world will be checked out, its symlinks read from the image, so
    that this refuses before anything is written. PfError (exit 2) for a link naming something
    odd, or when there are such directories and no mount namespace can be made."""
    if not links:
        return []
    shown = os.path.realpath(root) if shown_at(world, root) else os.path.realpath(world)
    view = gitlinks.InImage(*image, str(world)) if image is not None else str(world)
    dirs = gitlinks.private_dirs(tuple(links), view, shown)
    if dirs and not namespaces_available():
        raise PfError(f"the world's git links name '{dirs[0]}', outside it, and no private mount namespace can be "
                      f"made here to keep it from the agent's git commands (give --no-isolate to run anyway: they "
                      f"would change it)", 2)
    return dirs


def isolated(cmd: list[str], world: Path, root: str | None, cwd: str | None, links=(), *, isolate: bool = True,
             scratch: Path | None = None) -> list[str]:
    """CMD as it must start so that the recorded sandbox path ``root`` shows ``world`` (and its cwd
    is the recorded one) and the git directories outside the world that its git ``links`` name
    are private overlays (their upper layers on a tmpfs mounted at ``scratch``/gitdirs, an empty
    directory of the caller's): wrapped in a mount namespace, or as it is when there is nothing to
    hide (no recorded path, the same path, a recorded path that is gone, and no git directory
    outside the world; ``isolate`` False). Raises PfError (exit 2) when something must be hidden
    and no namespace can be had, or a link names something odd (``gitlinks.private_dirs``)."""
    if not isolate:
        return list(cmd)
    bind = shown_at(world, root)
    if bind and not namespaces_available():
        check_isolation(root)  # its line
    dirs = git_dirs(world, root, links)
    if not bind and not dirs:
        return list(cmd)
    start_check(cmd, os.environ)
    here = cwd if bind and cwd and os.path.isdir(cwd) else ""
    upper = ""
    if dirs:
        if scratch is None:
            raise ValueError("isolated: a scratch directory is needed for the overlays")
        upper = os.path.join(os.path.realpath(scratch), "gitdirs")
        if any(ch in upper for ch in gitlinks.UNSAFE_CHARS):
            raise PfError(f"the temporary directory '{upper}' holds ',', ':', '\\' or a newline, which an overlay "
                          f"cannot take (set TMPDIR elsewhere)", 2)
        os.makedirs(upper, exist_ok=True)
        if not overlays_available(upper):
            raise PfError(f"the world's git links name '{dirs[0]}', outside it, and no overlay can be mounted here "
                          f"to keep it from the agent's git commands (Linux 5.11 or later; give --no-isolate to "
                          f"run anyway: they would change it)", 2)
    return [*_unshare(), "sh", "-c", _ENTER, "sh", str(world), os.path.realpath(root) if bind else "", here, upper,
            str(len(dirs)), *dirs, *cmd]
