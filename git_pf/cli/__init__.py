"""The ``git-pf`` command line: a thin layer over ``git_pf.Repo``.

``app`` holds the Typer application; each ``cmd_*`` module registers the
commands of one concept; ``commands`` imports them all. ``main``, the console
entry point, only adds signal handling around ``app.main`` (standard library
only: its import time is every command's) and answers ``--version`` and
``hook claude-code`` itself.
"""
from __future__ import annotations

import sys

from .. import __version__

_PR_SET_PDEATHSIG = 1


def version_line() -> str:
    return f"git-pf {__version__}"


def _run_command() -> int:
    """Runs the command. ``--version`` is answered before Typer and the commands load;
    everything else goes through ``app.main``."""
    if sys.argv[1:] == ["--version"]:
        from .pipe import write

        return write(version_line() + "\n")
    if sys.argv[1:] == ["hook", "claude-code"]:  # Claude Code waits on every hook: no Typer, no pygit2 up front
        from ..integrations.claude_code.hook import main as hook

        return hook()
    from .client import serve  # the repository's command server, when it runs this command

    served = serve(sys.argv[1:])
    if served is not None:
        return served
    from .app import main as run
    from .client import start_pending

    code = run()
    start_pending()  # no server ran it: one starts for the next command
    return code


def main() -> None:
    """The ``git-pf`` console entry point: ties this process to git's dispatcher, makes
    ``SIGTERM`` end the command as Ctrl-C does (``finally`` blocks run, nothing half-written
    stays), runs the command, and says in one line that it was interrupted (docs/cli.md,
    "Signals")."""
    import signal

    caught = []

    def on_signal(signum, frame):
        for sig in watched:  # a second signal must not cut the cleanup short
            signal.signal(sig, lambda *_: None)
        caught.append(signum)
        raise KeyboardInterrupt

    watched = [signal.SIGTERM]
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:  # not when started with SIGINT ignored
        watched.append(signal.SIGINT)
    for sig in watched:
        signal.signal(sig, on_signal)
    try:
        _die_with_git()
        code = _run_command()
    except KeyboardInterrupt:  # before the command's own error boundary was entered
        code = 130
    if caught and code == 130:
        sys.stderr.write("git pf: interrupted\n")
        code = 128 + caught[0]
    sys.exit(code)


def _die_with_git() -> None:
    """When git's dispatcher (``git pf …``) started this process, have the kernel send it
    SIGTERM when that parent ends, even by ``kill -9`` (Linux ``PR_SET_PDEATHSIG``)."""
    import os
    import signal

    parent = os.getppid()
    try:
        with open(f"/proc/{parent}/comm", "rb") as f:
            if f.read().strip() != b"git":
                return
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0) != 0:
            return
    except (OSError, AttributeError):
        return  # not Linux, or no /proc: a killed dispatcher leaves this process running, as before
    if os.getppid() != parent:  # the dispatcher ended before the prctl took effect: no signal will come
        os.kill(os.getpid(), signal.SIGTERM)


__all__ = ["main", "version_line"]
