"""``git pf init`` and ``git pf fsck``."""
from __future__ import annotations

from pathlib import Path

import typer

from ..core.errors import EXIT_NEGATIVE
from .app import JsonOpt, app, emit, open_repo


@app.command()
def init(
    directory: Path = typer.Argument(Path("."), help="Directory to make a git-pf repository (created if missing)."),
    as_json: bool = JsonOpt,
) -> None:
    """Make DIR a git repository ready for git-pf (does nothing to one that already is)."""
    from ..repo import Repo

    repo, created = Repo.init(directory)
    emit(as_json, {"git_dir": str(repo.git_dir), "created": created},
         lambda: typer.echo(f"{'Initialized' if created else 'Reinitialized'} git-pf repository in {repo.git_dir}"))


@app.command()
def fsck(as_json: bool = JsonOpt) -> int:
    """Check every image under refs/pf/ and every side-store object; exit 1 on problems."""
    repo = open_repo()
    report = repo.fsck()
    from ..image.verify import untrusted_lines

    pol, untrusted = untrusted_lines(repo.git)  # pf.verify: images not signed by a trusted key
    report.problems += untrusted if pol == "require" else []

    def human() -> None:
        for line in untrusted if pol != "require" else []:
            typer.echo(f"warning: {line}")
        for line in report.problems:
            typer.echo(f"error: {line}")
        typer.echo(f"checked {report.images} images, {report.objects} side-store objects: "
                   f"{'ok' if report.ok else f'{len(report.problems)} problems'}")

    emit(as_json, dict(report.to_json(), signature={"policy": pol, "untrusted": untrusted}), human)
    return 0 if report.ok else EXIT_NEGATIVE
