"""``git pf checkout`` and ``git pf fork``: materialising and branching images."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import format as fmt
from .app import JsonOpt, app, emit, mount_manager, open_repo


@app.command()
def checkout(
    rev: str = typer.Argument(..., help="The image to check out."),
    into: Path = typer.Option(..., "--into", help="Directory to write into (created; must be empty unless --force)."),
    layers: str = typer.Option("world", "--layers", help="Comma-separated layers: world,trace,effects,env."),
    force: bool = typer.Option(False, "--force", help="Replace the contents of a non-empty directory."),
    step: Optional[int] = typer.Option(None, "--at-step", metavar="N", help="The image of step N of REV's run."),
    as_json: bool = JsonOpt,
) -> None:
    """Write an image's layers into a directory, exactly; all or nothing."""
    repo = open_repo()
    if step is not None:
        from ..runs.steps import at_step

        rev = at_step(repo.git, rev, step)
    result = repo.checkout(rev, into, layers, force)

    def human() -> None:
        parts = [f"{result.stats.files} files, {fmt.size(result.stats.bytes)}"] if "world" in result.layers else []
        if result.layer_files or "world" not in result.layers:
            parts.append(f"{len(result.layer_files)} layer files")
        typer.echo(f"checked out {result.image.short} into {result.path}: {'; '.join(parts)}")
        if "world" not in result.layers:
            for path in result.layer_files:
                typer.echo(f"  {path}")

    emit(as_json, result.to_json(), human)


@app.command()
def fork(
    rev: str = typer.Argument(..., help="The image to fork."),
    n: int = typer.Option(1, "-n", help="How many forks."),
    name: Optional[str] = typer.Option(None, "--name", help="Branch name prefix (forks are PREFIX-1..N)."),
    explore: Optional[str] = typer.Option(None, "--explore", help="What the forks explore (their label)."),
    mount: Optional[Path] = typer.Option(None, "--mount", help="Also mount each fork copy-on-write at DIR/<fork name>."),
    force: bool = typer.Option(False, "--force", help="With --mount: mount over non-empty directories."),
    step: Optional[int] = typer.Option(None, "--at-step", metavar="N",
                                       help="Fork REV's run at step N: steps 1..N-1 shared, step N's response changed."),
    response: Optional[Path] = typer.Option(None, "--response", metavar="FILE",
                                            help="With --at-step: the new response (reply text or a full response body)."),
    edit: bool = typer.Option(False, "--edit", help="With --at-step: write the new reply in $GIT_EDITOR / $EDITOR."),
    as_json: bool = JsonOpt,
) -> None:
    """Make N forks of an image, one branch each; print '<id> <branch>' per fork."""
    if step is not None or response is not None or edit:
        _fork_at_step(rev, step, response, edit, name, n != 1 or explore is not None or mount is not None, as_json)
        return
    if mount is None:
        forks = open_repo().fork(rev, n, name, explore)
        emit(as_json, [f.to_json() for f in forks], lambda: [typer.echo(f"{f.id} {f.name}") for f in forks])
        return

    manage = mount_manager()
    repo = open_repo()
    rows = [dict(f.to_json(), mountpoint=s.mountpoint) for f, s in manage.fork_and_mount(repo, rev, n, name, explore, mount, force)]
    emit(as_json, rows, lambda: [typer.echo(f"{r['id']} {r['name']} {r['mountpoint']}") for r in rows])


def _fork_at_step(rev: str, step: Optional[int], response: Optional[Path], edit: bool, name: Optional[str],
                  other: bool, as_json: bool) -> None:
    """``git pf fork REV --at-step N [--response FILE | --edit] [--name NAME]``."""
    from ..core.errors import UsageError
    from ..runs.llm import wire
    from ..runs import forking

    if step is None:
        raise UsageError("--response and --edit need --at-step N")
    if response is not None and edit:
        raise UsageError("give --response FILE or --edit, not both")
    if other:
        raise UsageError("--at-step makes one branch: it takes no -n, --explore or --mount")
    repo = open_repo()
    if response is not None:
        from ..core.jsonl import read_bytes

        data = read_bytes(response, "--response")
        change = lambda entry: wire.response_from_file(entry, data)  # noqa: E731
    elif edit:
        change = lambda entry: forking.reply_from_editor(repo, entry)  # noqa: E731
    else:
        change = dict
    name = name or forking.default_name(repo.git, rev, step)
    image = forking.fork_at_step(repo, rev, step, entry_change=change, name=name)
    emit(as_json, {"id": image.id, "name": name, "step": step, "forked_from": image.trailer("Pf-Forked-From")[0]},
         lambda: typer.echo(f"{image.id} {name}"))
