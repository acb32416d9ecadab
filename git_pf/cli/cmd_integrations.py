"""``git pf hook claude-code``, ``git pf rewind`` and the ``--claude-code`` half of install / uninstall.

``git pf hook claude-code`` with no other argument is answered before Typer
loads (``git_pf.cli._run_command``): a hook must cost one small process.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Optional

import typer

from ..errors import UsageError
from .app import JsonOpt, app, emit, open_repo

def install_claude_code(scope: str, as_json: bool) -> None:
    from ..integrations import claude_code_settings as settings

    result = settings.install(open_repo(), scope)
    emit(as_json, result, lambda: typer.echo(
        f"added git-pf's Claude Code hooks ({', '.join(result['added'])}) to {result['path']}" if result["added"]
        else f"git-pf's Claude Code hooks are already in {result['path']}; nothing changed"))


def uninstall_claude_code(scope: str, as_json: bool) -> None:
    from ..integrations import claude_code_settings as settings

    result = settings.uninstall(open_repo(), scope)

    def human() -> None:
        if result["restored"]:
            typer.echo(f"restored {result['path']} as it was before 'git pf install --claude-code'")
        elif result["removed"]:
            typer.echo(f"removed git-pf's hooks ({', '.join(result['removed'])}) from {result['path']}")
        else:
            typer.echo(f"no git-pf hooks in {result['path']}; nothing changed")

    emit(as_json, result, human)


@app.command()
def hook(
    framework: str = typer.Argument(..., metavar="claude-code", help="The agent whose hook event is on stdin."),
    stop_server: bool = typer.Option(False, "--stop-server", help="Stop this repository's hook server and exit."),
) -> None:
    """Handle one Claude Code hook event (JSON on stdin); always exits 0, a failure is one line on stderr."""
    if framework != "claude-code":
        raise UsageError(f"unknown hook '{framework}' (choose from claude-code)")
    from ..integrations import claude_code_hook

    if not stop_server:
        raise typer.Exit(claude_code_hook.main())
    reply = claude_code_hook.exchange(claude_code_hook.state_dir(open_repo().git_dir), {"stop": True})
    typer.echo("stopped the hook server" if reply else "no hook server was running")


@app.command()
def rewind(
    session: Optional[str] = typer.Argument(None, help="The session id or its branch cc/<id> (default: the latest)."),
    to_step: int = typer.Option(..., "--to-step", help="The step whose project directory to restore (0: the session's start)."),
    into: Optional[Path] = typer.Option(None, "--into", help="The directory to restore (default: the session's project)."),
    yes: bool = typer.Option(False, "-y", "--yes", help="Overwrite without asking."),
    as_json: bool = JsonOpt,
) -> None:
    """Put the project directory back as it was at a step of a Claude Code session, shell commands' changes included."""
    from ..integrations import claude_code_rewind as rw

    repo = open_repo()
    plan = rw.plan(repo, session, to_step, into)
    where = f"{plan.root} to step {plan.step} of session {plan.session} (image {plan.image.short})"
    if plan.empty:
        emit(as_json, {**plan.to_json(), "applied": False},
             lambda: typer.echo(f"{plan.root} is already as at step {plan.step}; nothing changed"))
        return
    if not yes:
        summary = f"rewind {where}: {len(plan.write)} files to write, {len(plan.remove)} to remove"
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise UsageError(f"{summary}; not a terminal, so nothing was done (add --yes)")
        for rel in (plan.write + plan.remove)[:20]:
            typer.echo(f"  {'remove' if rel in plan.remove else 'write '} {os.fsdecode(rel)}", err=True)
        if not typer.confirm(f"{summary}. Go on?", default=False, err=True):
            typer.echo("git pf: nothing was done", err=True)
            raise typer.Exit(1)
    rw.apply(repo, plan)
    emit(as_json, {**plan.to_json(), "applied": True}, lambda: typer.echo(
        f"rewound {where}: {len(plan.write)} files written, {len(plan.remove)} removed"))
