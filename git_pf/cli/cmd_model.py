"""``git pf model-merge``: merge N images' adapters N-way into a new image (docs/model.md)."""
from __future__ import annotations

from typing import List, Optional

import typer

from .app import JsonOpt, app, emit, open_repo


@app.command("model-merge")
def model_merge(
    revs: List[str] = typer.Argument(..., help="Two or more images whose adapters to merge."),
    output: str = typer.Option(..., "-o", "--output", help="Name of the new branch that receives the merged image."),
    method: str = typer.Option("ties", "--method", help="ties | dare | dare_ties | linear."),
    density: Optional[float] = typer.Option(None, "--density", help="TIES: fraction of each task vector kept (default 1)."),
    drop: Optional[float] = typer.Option(None, "--drop", help="DARE: drop probability p (default 1 - density, else 0)."),
    weights: Optional[str] = typer.Option(None, "--weights", help="Comma-separated weight per image (default 1 each)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the DARE masks (recorded in the image)."),
    rank: Optional[int] = typer.Option(None, "--rank", help="Rank of the merged LoRA (default: the adapters' rank)."),
    base: Optional[str] = typer.Option(None, "--base", help="Image whose adapter the task vectors are taken against, or 'none' (default: the images' common ancestor)."),
    message: Optional[str] = typer.Option(None, "-m", "--message", help="Subject line of the new image."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print only the image id."),
    as_json: bool = JsonOpt,
) -> None:
    """Merge the adapters (and weight deltas) of N images N-way into a new image on branch -o.

    The new image keeps the first image's other layers; its trailers record the
    method, the seed and every source image."""
    from ..layers.model.model_merge import model_merge as run
    from ..layers.model.options import MergeSpec

    spec = MergeSpec.parse(method, density, drop, weights, seed, rank)
    repo = open_repo()
    result = run(repo, list(revs), spec, output, base, message)

    def human() -> None:
        if not quiet:
            ad = result.report.get("adapter")
            if ad:
                typer.echo(f"merged {len(revs)} adapters with {ad['method']} (seed {ad['seed']}) into rank {ad['rank']}: "
                           f"relative reconstruction error {ad['error']:.3g}", err=True)
        typer.echo(result.image.id)

    emit(as_json, result.to_json(), human)
