"""The ``git pf`` Typer application, its error boundary and output helpers.

Every command module registers on ``app``. ``main`` turns every failure into
one line on stderr and a meaningful exit code (docs/cli.md); a traceback is
shown only with ``GIT_PF_DEBUG=1``. This module and the command modules
import only Typer and the standard library at load time (``-h`` loads them
all); a command imports what it runs inside its function.
"""
from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING, Any, Callable

import typer
from typer.core import TyperGroup

try:  # Typer >= 0.20 vendors its own click; its exceptions are the ones raised
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older Typer on the real click
    from click import exceptions as click_exc

from ..core.errors import EXIT_NEGATIVE, EXIT_USAGE, PfError
from . import coerce, pipe, version_line

if TYPE_CHECKING:
    from ..repo import Repo

coerce.install()  # plain values without pydantic: 50-70 ms less on every call

CONTEXT = {"help_option_names": ["-h", "--help"]}

# How ``git pf -h`` groups the commands, as ``git help`` groups git's (docs/cli.md); a command
# in no group is listed last, under "other commands".
GROUPS = (
    ("start a repository", ("init",)),
    ("images", ("snapshot", "show", "log", "diff", "checkout", "fork", "merge", "model-merge", "verify")),
    ("branches and tags", ("ls", "branch", "tag", "switch")),
    ("remotes", ("push", "fetch", "clone", "remote-store", "install", "uninstall")),
    ("mounts", ("mount", "umount", "mounts")),
    ("runs", ("record", "replay", "run", "fanout", "blame", "report", "serve")),
    ("integrations", ("hook", "rewind")),
    ("maintenance", ("fsck", "gc", "server")),
)


class GroupedHelp(TyperGroup):
    """The root command: its help lists the commands in ``GROUPS``."""

    def format_commands(self, ctx, formatter) -> None:
        commands = {}
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                commands[name] = cmd
        if not commands:
            return
        limit = formatter.width - 6 - max(len(name) for name in commands)
        placed: set[str] = set()
        for title, names in GROUPS + (("other commands", tuple(commands)),):
            rows = [(n, commands[n].get_short_help_str(limit)) for n in names if n in commands and n not in placed]
            placed.update(n for n, _ in rows)
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


app = typer.Typer(
    cls=GroupedHelp,
    name="git pf",
    help="fork() for AI agents: snapshot, fork, merge and push live agent state with git.",
    context_settings=CONTEXT,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON instead of text.")


def _version(value: bool) -> None:
    if value:
        typer.echo(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """fork() for AI agents: snapshot, fork, merge and push live agent state with git."""


def open_repo() -> Repo:
    from ..repo import Repo

    return Repo.open(os.environ.get("GIT_PF_REPO", "."))


def mount_manager():
    """The mount manager (``git_pf.mount.manage``), or one clear line when this machine cannot mount;
    mount, umount, ``fork --mount`` and ``replay --mount`` start with it."""
    import shutil
    from pathlib import Path

    from ..core.errors import UsageError
    from ..mount import manage

    if shutil.which("fusermount3") is None:
        raise UsageError("mounting needs fusermount3 on PATH (install the fuse3 package)")
    if not Path("/dev/fuse").exists():
        raise UsageError("mounting needs /dev/fuse (load the fuse kernel module)")
    return manage


def emit(as_json: bool, data: Any, human: Callable[[], None]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        human()


def warn(line: str) -> None:
    typer.echo(f"warning: {line}", err=True)


# Python API parameters whose command-line flag is not ``--`` + the name with ``-`` for ``_``.
_FLAGS = {"directory": "--mount"}


def flag_message(e: PfError) -> str:
    """The error's line as the CLI shows it: the flag where the API names a parameter."""
    if not e.param:
        return e.message
    return f"{_FLAGS.get(e.param) or '--' + e.param.replace('_', '-')}: {e.detail}"


def say(line: str) -> None:
    """One line of git-pf's own on stderr (progress, summaries, warnings), beside a command's output."""
    typer.echo(f"git pf: {line}", err=True)


def _fail(text: str, code: int) -> int:
    sys.stderr.write(f"git pf: {text}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    from . import commands  # noqa: F401  (registers every command)

    try:
        result = app(args=argv, prog_name="git pf", standalone_mode=False)
        sys.stdout.flush()  # a reader that went away shows here, inside this boundary, not at exit
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx is not None else "usage: git pf COMMAND [ARGS]...")
        return EXIT_USAGE
    except click_exc.UsageError as e:
        cmd = e.ctx.command_path if e.ctx is not None else "git pf"
        return _fail(f"{e.format_message()} (see '{cmd} -h')", EXIT_USAGE)
    except click_exc.ClickException as e:
        return _fail(e.format_message(), EXIT_USAGE)
    except PfError as e:
        return _fail(f"error: {flag_message(e)}", e.code)
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except SystemExit as e:  # Typer's own answer to a broken pipe (exit 1); nothing else exits so
        if isinstance(e.__context__, BrokenPipeError):
            return _broken_pipe(e.__context__)
        raise
    except BrokenPipeError as e:
        return _broken_pipe(e)
    except OSError as e:
        return _os_error(e)
    except Exception as e:  # a bug: still one line, with a way to see more
        if os.environ.get("GIT_PF_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (GIT_PF_DEBUG=1 shows the traceback)", 70)
    return result if isinstance(result, int) else 0


def _broken_pipe(e: BrokenPipeError) -> int:
    if pipe.closed_stdout():  # `git pf log | head -1`: end quietly, as git does
        return pipe.quiet_exit()
    return _os_error(e)  # a pipe to a child process: a real failure


def _os_error(e: OSError) -> int:
    if os.environ.get("GIT_PF_DEBUG"):
        raise e
    name = os.fsdecode(e.filename) if isinstance(e.filename, bytes) else e.filename
    where = f": '{name}'" if name else ""
    return _fail(f"error: {e.strerror or e}{where}", EXIT_NEGATIVE)

