"""``git pf server status|stop``: the repository's command server (docs/server.md)."""
from __future__ import annotations

import os
import time

import typer

from ..core.errors import UsageError
from .app import CONTEXT, JsonOpt, app, emit, open_repo

server_app = typer.Typer(help="The repository's command server: status, stop.", no_args_is_help=True, context_settings=CONTEXT)
app.add_typer(server_app, name="server")

_FIELDS = ("pid", "socket", "started", "served", "running", "memory", "idle_timeout")


def _git_dir() -> str:
    return os.path.realpath(open_repo().git_dir)


@server_app.command()
def status(as_json: bool = JsonOpt) -> None:
    """Whether a server runs for this repository: its pid, socket, commands served, memory, watches."""
    from . import client as cmdclient

    answer = cmdclient.ask(_git_dir(), b"status")
    if not answer or answer[0] != b"status" or len(answer) < 1 + len(_FIELDS):
        info = {"running": False, "disabled": cmdclient.disabled()}
        emit(as_json, info, lambda: typer.echo("server: not running" + (" (GIT_PF_SERVER=0)" if info["disabled"] else "")))
        return
    raw = dict(zip(_FIELDS, answer[1:]))
    try:
        info = {"running": True, "pid": int(raw["pid"]), "socket": os.fsdecode(raw["socket"]),
                "started": int(raw["started"]), "served": int(raw["served"]), "commands_running": int(raw["running"]),
                "memory_bytes": int(raw["memory"]), "idle_timeout_s": float(raw["idle_timeout"]),
                "watching": [os.fsdecode(r) for r in answer[1 + len(_FIELDS):]]}
    except ValueError:
        raise UsageError("the command server gave a malformed answer") from None

    def human() -> None:
        typer.echo(f"server: running (pid {info['pid']}) since {time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(info['started']))}")
        typer.echo(f"socket: {info['socket']}")
        typer.echo(f"commands: {info['served']} served, {info['commands_running']} running")
        typer.echo(f"memory: {info['memory_bytes'] / (1 << 20):.1f} MiB")
        typer.echo(f"idle timeout: {info['idle_timeout_s']:g} s")
        for root in info["watching"]:
            typer.echo(f"watching: {root}")

    emit(as_json, info, human)


@server_app.command()
def stop() -> None:
    """Stop this repository's server (it finishes the commands running); the next command starts a new one."""
    from . import client as cmdclient

    answer = cmdclient.ask(_git_dir(), b"stop")
    typer.echo("server: stopped" if answer and answer[0] == b"stopping" else "server: not running")
