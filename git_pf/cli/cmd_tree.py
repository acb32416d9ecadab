"""``git pf checkout`` and ``git pf fork``: materialising and branching images."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from . import format as fmt
from .app import JsonOpt, app, emit, open_repo


@app.command()
def checkout(
    rev: str = typer.Argument(..., help="The image to check out."),
    into: Path = typer.Option(..., "--into", help="Directory to write into (created; must be empty unless --force)."),
    layers: str = typer.Option("world", "--layers", help="Comma-separated layers: world,trace,effects,env."),
    force: bool = typer.Option(False, "--force", help="Replace the contents of a non-empty directory."),
    as_json: bool = JsonOpt,
) -> None:
    """Write an image's layers into a directory, exactly; all or nothing."""
    result = open_repo().checkout(rev, into, layers, force)

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
    as_json: bool = JsonOpt,
) -> None:
    """Make N forks of an image, one branch each; print '<id> <branch>' per fork."""
    if mount is None:
        forks = open_repo().fork(rev, n, name, explore)
        emit(as_json, [f.to_json() for f in forks], lambda: [typer.echo(f"{f.id} {f.name}") for f in forks])
        return
    from .cmd_mount import _fuse

    manage = _fuse()
    repo = open_repo()
    rows = [dict(f.to_json(), mountpoint=s.mountpoint) for f, s in manage.fork_and_mount(repo, rev, n, name, explore, mount, force)]
    emit(as_json, rows, lambda: [typer.echo(f"{r['id']} {r['name']} {r['mountpoint']}") for r in rows])
