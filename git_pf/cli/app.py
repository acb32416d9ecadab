"""The ``git pf`` Typer application, its error boundary and output helpers.

Every command module registers on ``app``. ``main`` turns every failure into
one line on stderr and a meaningful exit code (docs/cli.md); a traceback is
shown only with ``GIT_PF_DEBUG=1``.
"""
from __future__ import annotations

import json
import os
import sys
from typing import Any, Callable

import typer

try:  # Typer >= 0.20 vendors its own click; its exceptions are the ones raised
    from typer._click import exceptions as click_exc
except ImportError:  # pragma: no cover - older Typer on the real click
    from click import exceptions as click_exc

from .. import __version__
from ..errors import EXIT_NEGATIVE, EXIT_USAGE, PfError
from ..repo import Repo

CONTEXT = {"help_option_names": ["-h", "--help"]}

app = typer.Typer(
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
        typer.echo(f"git-pf {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version and exit."),
) -> None:
    """fork() for AI agents: snapshot, fork, merge and push live agent state with git."""


def open_repo() -> Repo:
    return Repo.open(os.environ.get("GIT_PF_REPO", "."))


def emit(as_json: bool, data: Any, human: Callable[[], None]) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))
    else:
        human()


def warn(line: str) -> None:
    typer.echo(f"warning: {line}", err=True)


def _fail(text: str, code: int) -> int:
    sys.stderr.write(f"git pf: {text}\n")
    return code


def main(argv: list[str] | None = None) -> int:
    from . import commands  # noqa: F401  (registers every command)

    try:
        result = app(args=argv, prog_name="git pf", standalone_mode=False)
    except click_exc.NoArgsIsHelpError as e:
        typer.echo(e.ctx.get_help() if e.ctx is not None else "usage: git pf COMMAND [ARGS]...")
        return EXIT_USAGE
    except click_exc.UsageError as e:
        cmd = e.ctx.command_path if e.ctx is not None else "git pf"
        return _fail(f"{e.format_message()} (see '{cmd} -h')", EXIT_USAGE)
    except click_exc.ClickException as e:
        return _fail(e.format_message(), EXIT_USAGE)
    except PfError as e:
        return _fail(f"error: {e.message}", e.code)
    except (KeyboardInterrupt, typer.Abort):
        return _fail("interrupted", 130)
    except BrokenPipeError:
        return 0
    except OSError as e:
        if os.environ.get("GIT_PF_DEBUG"):
            raise
        name = os.fsdecode(e.filename) if isinstance(e.filename, bytes) else e.filename
        where = f": '{name}'" if name else ""
        return _fail(f"error: {e.strerror or e}{where}", EXIT_NEGATIVE)
    except Exception as e:  # a bug: still one line, with a way to see more
        if os.environ.get("GIT_PF_DEBUG"):
            raise
        return _fail(f"internal error: {type(e).__name__}: {e} (GIT_PF_DEBUG=1 shows the traceback)", 70)
    return result if isinstance(result, int) else 0


def run() -> None:
    sys.exit(main())
