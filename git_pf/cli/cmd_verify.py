"""``git pf verify``: the signature status of images under the trust policy (docs/security.md)."""
from __future__ import annotations

from typing import List

import typer

from ..core.errors import EXIT_NEGATIVE, UsageError
from .app import JsonOpt, app, emit, open_repo


@app.command()
def verify(
    revs: List[str] = typer.Argument(None, metavar="REV...", help="The images to check."),
    all_images: bool = typer.Option(False, "--all", help="Every image on the lines of every image ref."),
    as_json: bool = JsonOpt,
) -> int:
    """Print each image's signature status; exit 1 when any is not trusted (signed, or covered by a signed descendant, by a trusted key)."""
    from ..image import refs, verify as ver

    if bool(revs) == all_images:
        raise UsageError("give REV... or --all")
    repo = open_repo()
    git = repo.git
    verifier = ver.Verifier(git)
    if all_images:
        verdicts = list(verifier.all_lines(ver.image_tips(git)).values())
    else:
        verdicts = [verifier.trust(refs.resolve(git, rev)) for rev in revs]
    rows = [(v, ver.policy(git, v.id)) for v in verdicts]

    def human() -> None:
        for v, pol in rows:
            typer.echo(f"{v.id[:12]} {'trusted' if v.trusted else 'untrusted'}: {v.describe()}")

    emit(as_json, [dict(v.to_json(), id=v.id, policy=pol) for v, pol in rows], human)
    return EXIT_NEGATIVE if any(not v.trusted for v in verdicts) else 0
