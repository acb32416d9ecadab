"""``git pf fanout``: N forks of an image, each running a command in its own world (docs/scale.md).

Progress (one line per finished fork) goes to stderr; the summary, best score
first, to stdout, or as JSON with ``--json``. Exit 0 when every fork ran
(whatever CMD's own exit), 1 when one could not, 2 on bad input.
"""
from __future__ import annotations

from typing import List, Optional

import typer

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo, say


def _exit(row: dict) -> str:
    return "timeout" if row["timed_out"] else str(row["exit"])


def table(out: dict) -> list[str]:
    """The human lines of a fan-out's summary."""
    rows = out["forks"]
    width = max([len(r["name"]) for r in rows] + [4])
    lines = [f"fanout of {out['rev'][:12]}: {len(rows)} forks on {out['executor']}, "
             f"{sum(1 for r in rows if r['exit'] == 0)} exited 0",
             f"{'fork':<{width}}  {'image':<12}  {'exit':>7}  {'time':>8}  score"]
    for r in rows:
        score = f"{r['score']:g}" if r["score"] is not None else "-"
        lines.append(f"{r['name']:<{width}}  {r['image'][:12]}  {_exit(r):>7}  {r['duration_s']:>7.2f}s  {score}")
    if rows and rows[0]["score"] is not None:
        lines.append(f"best: {rows[0]['name']} (git pf merge {rows[0]['name']})")
    return lines


@app.command()
def fanout(
    rev: str = typer.Argument(..., help="The image to fork."),
    cmd: Optional[List[str]] = typer.Argument(None, metavar="-- CMD [ARGS]...", help="What each fork runs in its world, after '--'."),
    n: int = typer.Option(..., "-n", help="How many forks."),
    name: Optional[str] = typer.Option(None, "--name", metavar="PREFIX", help="The forks' branches are PREFIX-<k> (default: REV's branch-fork)."),
    executor: str = typer.Option("local", "--executor", metavar="local|ray", help="Where forks run: threads here, or tasks on a Ray cluster."),
    jobs: Optional[int] = typer.Option(None, "--jobs", "-j", help="With the local executor: forks run at a time (default: the CPUs)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help="With --executor ray: the cluster (default: RAY_ADDRESS, else ray.init()'s)."),
    timeout: Optional[float] = typer.Option(None, "--timeout", metavar="SECONDS", help="Kill a fork's command after this long."),
    at_step: Optional[int] = typer.Option(None, "--at-step", metavar="N", help="REV is a recorded run: fork it at step N with a changed reply; CMD is the agent, run on."),
    perturb: str = typer.Option("text", "--perturb", metavar="text|drop|resample|none|module:function", help="With --at-step: how each fork's reply is changed (as blame's)."),
    seed: int = typer.Option(0, "--seed", help="With --at-step: the seed of the changes."),
    upstream: List[str] = typer.Option([], "--upstream", metavar="[openai=|anthropic=]URL", help="With --at-step: where live requests go (repeatable)."),
    as_json: bool = JsonOpt,
) -> None:
    """Fork REV N times and run CMD in each fork's world; each world becomes its fork's next image."""
    if not cmd:
        raise UsageError("give the command after '--'")
    from ..rollouts.fanout import fanout as do_fanout

    def progress(row: dict) -> None:
        score = f", score {row['score']:g}" if row["score"] is not None else ""
        again = "" if row.get("ran", True) else " (had run)"
        say(f"{row['name']}: exit {_exit(row)} in {row['duration_s']:.2f}s{score}{again}")

    out = do_fanout(open_repo(), rev, n, list(cmd), prefix=name, executor=executor, jobs=jobs,
                    ray_address=ray_address, timeout_s=timeout, at_step=at_step, perturb=perturb, seed=seed,
                    upstreams=list(upstream), progress=None if as_json else progress)
    emit(as_json, out, lambda: typer.echo("\n".join(table(out))))
