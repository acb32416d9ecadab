"""``git pf ls``, ``git pf branch`` and ``git pf tag``: naming images."""
from __future__ import annotations

from typing import Optional

import typer

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo


@app.command("ls")
def ls(as_json: bool = JsonOpt) -> None:
    """List branches and tags with the image each names."""
    entries = open_repo().refs()

    def human() -> None:
        for e in entries:
            mark = "*" if e.current else " "
            typer.echo(f"{mark} {e.kind:<6} {e.name:<24} {e.id[:12]} {e.subject}")

    emit(as_json, [e.to_json() for e in entries], human)


def _list(kind: str, as_json: bool) -> None:
    entries = [e for e in open_repo().refs() if e.kind == kind]
    emit(as_json, [e.to_json() for e in entries],
         lambda: [typer.echo(f"{'*' if e.current else ' '} {e.name}") for e in entries])


def _name_images(kind: str, name: Optional[str], rev: str, delete: bool, as_json: bool) -> None:
    """``branch`` or ``tag`` (``kind``): list them, create NAME at REV, or delete NAME."""
    repo = open_repo()
    if name is None:
        if delete:
            raise UsageError(f"{kind} -d needs a {kind} name")
        return _list(kind, as_json)
    if delete:
        old = getattr(repo, f"delete_{kind}")(name)
        return emit(as_json, {"deleted": name, "id": old}, lambda: typer.echo(f"Deleted {kind} {name} (was {old[:12]})"))
    image = getattr(repo, f"create_{kind}")(name, rev)
    emit(as_json, {"created": name, "id": image.id}, lambda: typer.echo(f"{image.id} {name}"))


@app.command()
def branch(
    name: Optional[str] = typer.Argument(None, help="Branch to create (or delete with -d)."),
    rev: str = typer.Argument("HEAD", help="Image the new branch starts at."),
    delete: bool = typer.Option(False, "-d", "--delete", help="Delete the branch."),
    as_json: bool = JsonOpt,
) -> None:
    """List branches, create one at REV, or delete one with -d."""
    _name_images("branch", name, rev, delete, as_json)


@app.command()
def tag(
    name: Optional[str] = typer.Argument(None, help="Tag to create (or delete with -d)."),
    rev: str = typer.Argument("HEAD", help="Image to tag."),
    delete: bool = typer.Option(False, "-d", "--delete", help="Delete the tag."),
    as_json: bool = JsonOpt,
) -> None:
    """List tags, tag REV as NAME, or delete a tag with -d."""
    _name_images("tag", name, rev, delete, as_json)


@app.command()
def switch(
    name: str = typer.Argument(..., help="Branch to make current."),
    create: bool = typer.Option(False, "-c", "--create", help="Create the branch at the current image first."),
    as_json: bool = JsonOpt,
) -> None:
    """Make BRANCH the current branch: where a bare snapshot, merge, log or push goes."""
    from ..image import refs

    repo = open_repo()
    if create:
        repo.create_branch(name, "HEAD")
    elif refs.branch_tip(repo.git, name) is None:
        raise UsageError(f"no such branch '{name}' (create it with -c)")
    repo.switch(name)
    emit(as_json, {"branch": name, "id": repo.current_branch_tip()},
         lambda: typer.echo(f"Switched to branch '{name}'"))
