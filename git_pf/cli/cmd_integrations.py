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

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo

def install_claude_code(scope: str, as_json: bool, check: bool = False) -> None:
    from ..integrations.claude_code import settings

    if check:
        report = settings.check(open_repo(), scope)

        def said() -> None:
            for r in report["commands"]:
                typer.echo(f"{'ok  ' if r['ok'] else 'FAIL'} {r['command'] or '-'}: {r['detail']}")

        emit(as_json, report, said)
        if not report["ok"]:
            raise typer.Exit(1)
        return
    result = settings.install(open_repo(), scope)
    emit(as_json, result, lambda: typer.echo(
        f"added git-pf's Claude Code hooks ({', '.join(result['added'])}) to {result['path']}" if result["added"]
        else f"git-pf's Claude Code hooks are already in {result['path']}; nothing changed"))
    if result["problem"] and not as_json:
        typer.echo(f"git pf: warning: Claude Code will not run the hook: {result['problem']}", err=True)


def uninstall_claude_code(scope: str, as_json: bool) -> None:
    from ..integrations.claude_code import settings

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
    from ..integrations.claude_code import hook as claude_code_hook

    if not stop_server:
        raise typer.Exit(claude_code_hook.main())
    reply = claude_code_hook.exchange(str(open_repo().git_dir), {"stop": True})
    typer.echo("stopped the hook server" if reply else "no hook server was running")


@app.command()
def rewind(
    session: Optional[str] = typer.Argument(None, help="The session id or its branch cc/<id> (default: the latest)."),
    to_step: Optional[int] = typer.Option(None, "--to-step", help="The step to go back to (0: the session's start)."),
    to_turn: Optional[int] = typer.Option(None, "--to-turn", help="Instead: the end of this turn (a prompt and its answer)."),
    scope: str = typer.Option("code", "--scope", help="code (the project directory), conversation (the transcript, "
                              "for claude --resume) or both."),
    into: Optional[Path] = typer.Option(None, "--into", help="The directory to restore (default: the session's project)."),
    yes: bool = typer.Option(False, "-y", "--yes", help="Overwrite without asking."),
    as_json: bool = JsonOpt,
) -> None:
    """Put the project directory, the conversation or both back as they were at a step or turn of a Claude Code
    session, shell commands' changes included."""
    from ..integrations.claude_code import rewind as rw

    repo = open_repo()
    plan = rw.plan(repo, session, to_step, into, turn=to_turn, scope=scope)
    point = f"turn {plan.turn}" if plan.turn is not None else f"step {plan.step}"
    what = {"code": str(plan.root), "conversation": "the conversation", "both": f"{plan.root} and the conversation"}[scope]
    where = f"{what} to {point} of session {plan.session} (image {plan.image.short})"
    if plan.empty:
        emit(as_json, {**plan.to_json(), "applied": False},
             lambda: typer.echo(f"{what} is already as at {point}; nothing changed"))
        return
    talk = f"{len(plan.write)} files to write, {len(plan.remove)} to remove"
    if scope != "code":
        lines = plan.conversation.count(b"\n")
        talk = f"the transcript cut to {lines} lines" + ("" if scope == "conversation" else f", {talk}")
    if not yes:
        summary = f"rewind {where}: {talk}"
        if not (sys.stdin.isatty() and sys.stderr.isatty()):
            raise UsageError(f"{summary}; not a terminal, so nothing was done (add --yes)")
        for rel in (plan.write + plan.remove)[:20]:
            typer.echo(f"  {'remove' if rel in plan.remove else 'write '} {os.fsdecode(rel)}", err=True)
        if not typer.confirm(f"{summary}. Go on?", default=False, err=True):
            typer.echo("git pf: nothing was done", err=True)
            raise typer.Exit(1)
    rw.apply(repo, plan)
    emit(as_json, {**plan.to_json(), "applied": True}, lambda: typer.echo(f"rewound {where}: {talk}"))
