"""Running the ``git`` command line for transfers (push, fetch, ls-remote, config).

Every failure becomes one ``TransferFailed`` line (exit 1) naming what git said; nothing
here knows about images or the side store.
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

from ..core.errors import TransferFailed

# Never let a nested git run our own hooks or ask for credentials on a tty.
_BASE_ENV = {"GIT_TERMINAL_PROMPT": "0"}


def run(git_dir: Path, args: list[str], *, input: bytes | None = None, check: bool = True,
        quiet_stderr: bool = True, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``git --git-dir=<git_dir> ARGS``; raise a one-line TransferFailed when it fails and ``check``."""
    full_env = dict(os.environ, **_BASE_ENV, **(env or {}))
    full_env.pop("GIT_DIR", None)
    full_env.pop("GIT_INDEX_FILE", None)
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=input, env=full_env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet_stderr else None)
    if check and proc.returncode != 0:
        raise TransferFailed(f"git {args[0]} failed: {last_line(proc.stderr)}")
    return proc


def last_line(stderr: bytes | None) -> str:
    """The most telling line of git's stderr (the last 'fatal:'/'error:' one, else the last)."""
    lines = [l.strip() for l in (stderr or b"").decode("utf-8", "replace").splitlines() if l.strip()]
    for line in reversed(lines):
        if line.startswith(("fatal:", "error:", "remote: fatal", "remote: error", "!")):
            return line
    return lines[-1] if lines else "(no message)"


def ls_remote(git_dir: Path, url: str, patterns: list[str], cwd: Path | None = None) -> dict[str, str]:
    """``{ref: oid}`` the remote advertises for ``patterns``."""
    out = run(git_dir, ["ls-remote", url, *patterns], cwd=cwd).stdout.decode()
    refs = {}
    for line in out.splitlines():
        oid, _, name = line.partition("\t")
        refs[name] = oid
    return refs
