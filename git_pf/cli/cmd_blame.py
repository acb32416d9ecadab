"""``git pf blame``: which step of a failed run decided its failure (docs/blame.md).

Progress (one line per finished trial) goes to stderr; the table per step and
the decisive step to stdout, or the summary as JSON with ``--json``. Exit 0
when the blame completed, 1 when it could not (the run does not fail, the
budget), 2 on bad input. ``--validate`` hands over to
``git_pf.blame.validate``.
"""
from __future__ import annotations

from typing import List, Optional

import typer

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo, say


def parse_steps(text: str) -> tuple[int, int]:
    """``A..B`` (or one step ``N``) as (A, B)."""
    a, sep, b = text.partition("..")
    if not (a.isdigit() and a.isascii() and (not sep or (b.isdigit() and b.isascii()))):
        raise UsageError(f"--steps: '{text}' is not A..B (step numbers)")
    return int(a), int(b) if sep else int(a)


def _interval(iv) -> str:
    return f"[{iv[0]:.2f}, {iv[1]:.2f}]" if iv else "-"


def table(summary: dict) -> list[str]:
    """The human lines of a blame summary."""
    lines = [f"blame {summary['run']} of {summary['rev'][:12]}: k={summary['k']}, perturb {summary['perturb']}",
             f"{'step':>5} {'trials':>6} {'flips':>5} {'undef':>5} {'rate':>5} {'Wilson CI':>13} {'q':>7}  label"]
    for row in summary["steps"]:
        rate = f"{row['rate']:.2f}" if row["rate"] is not None else "-"
        q = f"{row['q']:.4f}" if row["q"] is not None else "-"
        lines.append(f"{row['step']:>5} {row['trials']:>6} {row['flips']:>5} {row['undefined']:>5} {rate:>5} "
                     f"{_interval(row['wilson']):>13} {q:>7}  {row['label']}")
    d = summary["decisive"]
    lines.append(f"decisive step: {d}" if d is not None else "no decisive step")
    cost = summary["cost"]
    if cost["estimate_usd"] is not None or cost["spent_usd"]:
        est = f"${cost['estimate_usd']:.4f}" if cost["estimate_usd"] is not None else "unknown"
        lines.append(f"cost: ${cost['spent_usd']:.4f} spent (estimate {est})")
    return lines


@app.command()
def blame(
    rev: Optional[str] = typer.Argument(None, help="The failed recorded run (its branch or last image)."),
    cmd: Optional[List[str]] = typer.Argument(None, metavar="-- AGENT_CMD [ARGS]...", help="The agent, after '--'."),
    oracle: Optional[str] = typer.Option(None, "--oracle", metavar="CMD", help="Grade by running 'sh -c CMD' in the final world (exit 0 = success)."),
    success_re: Optional[str] = typer.Option(None, "--success-re", metavar="RE", help="Grade by a regex found in the final response."),
    failure_re: Optional[str] = typer.Option(None, "--failure-re", metavar="RE", help="With --success-re: a regex that marks a failure (neither found: undefined)."),
    k: int = typer.Option(5, "-k", help="Trials per step."),
    steps: Optional[str] = typer.Option(None, "--steps", metavar="A..B", help="The steps to blame (default: all)."),
    perturb: Optional[str] = typer.Option(None, "--perturb", metavar="text|drop|resample|none|module:function", help="How a step's response is changed (default: text; resample with --validate)."),
    budget: Optional[float] = typer.Option(None, "--budget", metavar="USD", help="Refuse above this estimate; stop when live spending reaches it."),
    jobs: int = typer.Option(1, "--jobs", "-j", help="Trials run in parallel, each in its own world."),
    executor: str = typer.Option("local", "--executor", metavar="local|ray", help="Where trials run: threads here (--jobs), or tasks on a Ray cluster (docs/scale.md)."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDR", help="With --executor ray: the cluster (default: RAY_ADDRESS, else ray.init()'s)."),
    upstream: List[str] = typer.Option([], "--upstream", metavar="[openai=|anthropic=]URL", help="Where live requests go (repeatable)."),
    name: Optional[str] = typer.Option(None, "--name", metavar="RUN", help="The blame run's name (default: REV's branch)."),
    seed: int = typer.Option(0, "--seed", help="The seed of the perturbations."),
    null_rate: float = typer.Option(0.1, "--null-rate", help="The flip rate of a step that decided nothing."),
    alpha: float = typer.Option(0.05, "--alpha", help="The false discovery rate."),
    oracle_timeout: float = typer.Option(300.0, "--oracle-timeout", metavar="SECONDS", help="An oracle running longer is undefined."),
    mount: Optional[bool] = typer.Option(None, "--mount/--no-mount", help="Trial worlds as copy-on-write mounts (default: when FUSE is there) or checkouts."),
    resume_world: bool = typer.Option(False, "--resume-world", help="Start each trial in its fork step's world instead of step 0's (for an agent that restores its own state)."),
    no_world_check: bool = typer.Option(False, "--no-world-check", help="Do not check that each trial's world is each prefix step's as recorded."),
    no_isolate: bool = typer.Option(False, "--no-isolate", help="Do not show a trial's world at the path the run was recorded in (writes by that path then reach it)."),
    ignore_field: List[str] = typer.Option([], "--ignore-field", metavar="JSONPATH", help="A volatile request field left out of matching (repeatable)."),
    mask: List[str] = typer.Option([], "--mask", metavar="JSONPATH=REGEX", help="Mask the regex's matches under JSONPATH before matching (repeatable)."),
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME|FILE", help="An agent profile's ignored fields and masks."),
    validate: bool = typer.Option(False, "--validate", help="Measure blame's accuracy on built-in scripted agents with known faults."),
    cases: int = typer.Option(20, "--cases", help="With --validate: how many scripted runs."),
    as_json: bool = JsonOpt,
) -> None:
    """Find the step that decided a failed run: K forks per step with a perturbed response, each graded."""
    if validate:
        if rev is not None or cmd:
            raise UsageError("--validate runs its own agents: give no REV and no command")
        from ..blame.validate import main_validate

        raise typer.Exit(main_validate(None, cases=cases, k=k, jobs=jobs, seed=seed, perturb=perturb or "resample",
                                       as_json=as_json))
    if rev is None:
        raise UsageError("give the failed run REV (or --validate)")
    if not cmd:
        raise UsageError("give the agent's command after '--'")
    from ..blame.engine import BlameOptions, blame as do_blame
    from ..runs.runon import RunWorld
    from .cmd_runs import match_rules

    opts = BlameOptions(oracle=oracle, success_re=success_re, failure_re=failure_re, k=k,
                        steps=parse_steps(steps) if steps is not None else None, perturb=perturb or "text",
                        budget_usd=budget, jobs=jobs, upstreams=list(upstream), name=name, null_rate=null_rate,
                        alpha=alpha, seed=seed, oracle_timeout_s=oracle_timeout, mount=mount,
                        ignore=match_rules(ignore_field, mask, profile)[0], executor=executor,
                        ray_address=ray_address,
                        how=RunWorld(resume_world=resume_world, world_check=not no_world_check, isolate=not no_isolate))

    def progress(row: dict) -> None:
        say(f"step {row['step']} trial {row['trial']}: {row['outcome']} ({row['reason']})")

    summary = do_blame(open_repo(), rev, list(cmd), opts, progress=None if as_json else progress)
    emit(as_json, summary, lambda: typer.echo("\n".join(table(summary))))
    if k < opts.min_valid:
        say(f"warning: with -k {k} no step gets the {opts.min_valid} gradable trials a flip rate needs, so every "
             f"step is labelled insufficient (give -k {opts.min_valid} or more)")
