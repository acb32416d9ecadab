"""``git pf snapshot``: capture a sandbox and its layers as a new image."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from .. import jsonl
from ..errors import UsageError
from ..world import env as env_mod
from .app import JsonOpt, app, emit, open_repo, warn


@app.command()
def snapshot(
    fs_root: Path = typer.Option(..., "--fs-root", help="The sandbox directory to capture."),
    name: Optional[str] = typer.Option(None, "--name", help="Branch to add the image to (default: the current one, else main)."),
    agent: Optional[str] = typer.Option(None, "--agent", help="Agent identity as KIND[/VERSION]."),
    agent_fingerprint: Optional[str] = typer.Option(None, "--agent-fingerprint", help="A hash identifying the agent's code/config."),
    messages: Optional[Path] = typer.Option(None, "--messages", help="JSONL of the full message trace."),
    effects: Optional[Path] = typer.Option(None, "--effects", help="JSONL of the full effects ledger."),
    env: Optional[Path] = typer.Option(None, "--env", help="JSON of {cwd, env} or a flat NAME->value map."),
    capture_env: bool = typer.Option(False, "--capture-env", help="Record this process's cwd and environment."),
    no_redact: List[str] = typer.Option([], "--no-redact", help="Keep this variable's value even if it looks secret."),
    message: Optional[str] = typer.Option(None, "-m", "--message", help="Subject line of the image."),
    label: Optional[str] = typer.Option(None, "--label", help="What this line of work explores (inherited when omitted)."),
    ignore: List[str] = typer.Option([], "--ignore", help="A .gitignore-style pattern to skip (repeatable)."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Write an image even when nothing changed."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print nothing but the image id; no warnings."),
    as_json: bool = JsonOpt,
) -> None:
    """Snapshot the sandbox at --fs-root (and the given layers) as a new image; print its id.

    Layers not given (messages, effects, env) are carried over from the parent image."""
    from ..image import Agent

    if env is not None and capture_env:
        raise UsageError("--env and --capture-env cannot be used together")
    env_value = env_mod.from_file(env) if env is not None else env_mod.from_process() if capture_env else None
    repo = open_repo()
    result = repo.snapshot(
        fs_root,
        name=name,
        agent=Agent.parse(agent, agent_fingerprint),
        messages=jsonl.read(messages, "--messages") if messages is not None else None,
        effects=jsonl.read(effects, "--effects") if effects is not None else None,
        env=env_value,
        no_redact=set(no_redact),
        message=message,
        label=label,
        ignore=ignore,
        allow_empty=allow_empty,
    )
    if not quiet:
        for line in result.stats.skipped:
            warn(line)
        if result.unchanged and not as_json:
            warn(f"nothing changed since {result.image.short} on '{result.branch}'; no new image (use --allow-empty)")
    emit(as_json, result.to_json(), lambda: typer.echo(result.image.id))
