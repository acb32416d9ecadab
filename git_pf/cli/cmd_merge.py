"""``git pf merge``: three-way merge of an image into a branch (docs/merge.md)."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import EXIT_NEGATIVE, UsageError
from .app import JsonOpt, app, emit, open_repo


def _weights(given: list[str]) -> list[float] | None:
    parts = [p for text in given for p in text.split(",")]
    try:
        return [float(p) for p in parts] or None
    except ValueError:
        raise UsageError(f"--weights: '{','.join(given)}' is not a list of numbers") from None


def _plugin_options(method, density, drop, weights, seed, rank) -> dict:
    given = {"model.method": method, "model.density": density, "model.drop": drop,
             "model.weights": _weights(weights), "model.seed": seed, "model.rank": rank}
    return {k: v for k, v in given.items() if v is not None}


@app.command()
def merge(
    theirs: Optional[str] = typer.Argument(None, help="The image (branch, tag, id) to merge in."),
    into: Optional[str] = typer.Option(None, "--into", help="Branch to merge into (default: the current branch)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Report what the merge would do; write nothing."),
    prefer: List[str] = typer.Option([], "--prefer", help="LAYER=ours|theirs: take a whole layer from one side (repeatable)."),
    accept_dup: bool = typer.Option(False, "--accept-duplicate-effects", help="Keep an irreversible effect done on both sides."),
    no_ff: bool = typer.Option(False, "--no-ff", help="Write a merge image even when a fast-forward is possible."),
    unrelated: bool = typer.Option(False, "--allow-unrelated-histories", help="Merge images that share no ancestor."),
    checkout: Optional[Path] = typer.Option(None, "--checkout", help="On world conflicts, write the conflicted world (diff3 markers) to DIR."),
    cont: Optional[Path] = typer.Option(None, "--continue", help="Finish the merge whose resolved world is in DIR."),
    abort: Optional[Path] = typer.Option(None, "--abort", help="Give up the merge checked out in DIR and remove DIR."),
    model_method: Optional[str] = typer.Option(None, "--model-method", help="Model merge: ties | dare | dare-ties | linear."),
    density: Optional[float] = typer.Option(None, "--density", help="Model merge: fraction of delta entries kept (TIES/DARE)."),
    drop: Optional[float] = typer.Option(None, "--drop", help="Model merge: DARE drop rate."),
    weights: List[str] = typer.Option([], "--weights", help="Model merge: weights of ours, theirs: repeat it or separate by commas."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Model merge: random seed (reproducible merges)."),
    rank: Optional[int] = typer.Option(None, "--rank", help="Model merge: LoRA rank of the merged adapter."),
    as_json: bool = JsonOpt,
) -> int:
    """Merge THEIRS into a branch, layer by layer, from git's merge base.

    Exit 0 when clean (or up to date), 1 on conflicts (nothing written), 2 on bad input."""
    from ..merge import report

    modes = [m for m, v in (("--continue", cont), ("--abort", abort)) if v is not None]
    if len(modes) > 1 or (modes and (theirs or checkout is not None)):
        raise UsageError(f"{modes[0]} takes only DIR (no THEIRS, --checkout or other mode)")
    if not modes and not theirs:
        raise UsageError("missing THEIRS: the image to merge (see 'git pf merge -h')")
    repo = open_repo()
    if abort is not None:
        path = repo.merge_abort(abort)
        emit(as_json, {"status": "aborted", "checkout": str(path)}, lambda: typer.echo(f"Merge aborted; removed {path}"))
        return 0
    if cont is not None:
        result = repo.merge_continue(cont)
    else:
        result = repo.merge(theirs, into=into, dry_run=dry_run, prefer=list(prefer),
                            options=_plugin_options(model_method, density, drop, weights, seed, rank),
                            accept_duplicate_effects=accept_dup, no_ff=no_ff, allow_unrelated=unrelated,
                            checkout=checkout)
    emit(as_json, result.to_json(), lambda: [typer.echo(line) for line in report.lines(result)])
    return 0 if result.clean else EXIT_NEGATIVE
