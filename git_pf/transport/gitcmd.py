"""Running the ``git`` command line for transfers (push, fetch, ls-remote, config), at once or
begun ahead of the work that needs its answer (``Started``).

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


def _env(env: dict | None) -> dict:
    full_env = dict(os.environ, **_BASE_ENV, **(env or {}))
    full_env.pop("GIT_DIR", None)
    full_env.pop("GIT_INDEX_FILE", None)
    return full_env


def run(git_dir: Path, args: list[str], *, input: bytes | None = None, check: bool = True,
        quiet_stderr: bool = True, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run ``git --git-dir=<git_dir> ARGS``; raise a one-line TransferFailed when it fails and ``check``."""
    proc = subprocess.run(["git", f"--git-dir={git_dir}", *args], input=input, env=_env(env), cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE if quiet_stderr else None)
    return _checked(proc, args, check)


def _checked(proc: subprocess.CompletedProcess, args: list[str], check: bool) -> subprocess.CompletedProcess:
    if check and proc.returncode != 0:
        raise TransferFailed(f"git {args[0]} failed: {last_line(proc.stderr)}")
    return proc


class Started:
    """A git command (as ``run`` runs it) left running while the caller does other work, its
    ``input`` (a few KiB at most: it is written before anything is read) given at once:
    ``result`` waits for it and answers as ``run`` would; ``wait`` waits and drops its output."""

    def __init__(self, git_dir: Path, args: list[str], input: bytes | None = None, env: dict | None = None,
                 cwd: Path | None = None):
        self.args = args
        self.proc = subprocess.Popen(["git", f"--git-dir={git_dir}", *args],
                                     stdin=subprocess.DEVNULL if input is None else subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(env), cwd=cwd)
        if input is not None:
            try:
                self.proc.stdin.write(input)
            except BrokenPipeError:  # it ended without reading: its status says why
                pass
            finally:
                self.proc.stdin.close()
                self.proc.stdin = None  # all of it given: ``communicate`` has nothing to send

    def result(self, check: bool = True) -> subprocess.CompletedProcess:
        out, err = self.proc.communicate()
        return _checked(subprocess.CompletedProcess(self.proc.args, self.proc.returncode, out, err), self.args, check)

    def wait(self) -> None:
        self.result(check=False)


def last_line(stderr: bytes | None) -> str:
    """The most telling line of git's stderr (the last 'fatal:'/'error:' one, else the last)."""
    lines = [l.strip() for l in (stderr or b"").decode("utf-8", "replace").splitlines() if l.strip()]
    for line in reversed(lines):
        if line.startswith(("fatal:", "error:", "remote: fatal", "remote: error", "!")):
            return line
    return lines[-1] if lines else "(no message)"


def ls_remote(git_dir: Path, url: str, patterns: list[str], cwd: Path | None = None,
              started: Started | None = None) -> dict[str, str]:
    """``{ref: oid}`` the remote advertises for ``patterns`` (the answer of ``started``, the same
    ``ls-remote`` begun earlier with ``start_ls_remote``, when given)."""
    proc = started.result() if started is not None else run(git_dir, ["ls-remote", url, *patterns], cwd=cwd)
    out = proc.stdout.decode()
    refs = {}
    for line in out.splitlines():
        oid, _, name = line.partition("\t")
        refs[name] = oid
    return refs


def start_ls_remote(git_dir: Path, url: str, patterns: list[str], cwd: Path | None = None) -> Started:
    """``ls-remote`` begun now, its answer read later by ``ls_remote(..., started=)``."""
    return Started(git_dir, ["ls-remote", url, *patterns], cwd=cwd)
