"""``git pf blame --validate``: measure how often blame finds the step that decided a run, on runs
whose deciding step is known (docs/blame.md, "Validation").

Each case is task ``seed * 1000 + c`` of the scripted agent (``git_pf.testing.scripted``) with fault
class ``c mod 5`` at a step drawn from the seed: a fresh repository in a temporary directory, the run
recorded against the scripted model (the fake LLM server on 127.0.0.1), then blamed twice with the
scripted oracle: with the perturbation asked for (default ``resample``: the model, asked again,
answers healthily) and with ``none`` (the negative control: nothing changes, so no step may come out
decisive). Top-1: the decisive step is the fault step; top-3: the fault step is among the three
steps with the highest flip rate (ties go to the later step). Both get Wilson intervals, per fault
class and overall.

Touches only the temporary directories it makes (removed when a case ends, whatever happens) and
the fake server it starts; the repository a user runs it in is not read.
"""
from __future__ import annotations

import json
import shlex
import sys
import tempfile
from pathlib import Path

from ..core.errors import EXIT_NEGATIVE, EXIT_OK, PfError, UsageError
from ..testing import scripted

CASE_STRIDE = 1000  # case c of seed s is task s * 1000 + c


def case_plan(seed: int, case: int) -> scripted.FaultPlan:
    """The fault plan of case ``case`` (0-based) of a validation with ``seed``."""
    return scripted.fault_plan(seed * CASE_STRIDE + case, scripted.FAULTS[case % len(scripted.FAULTS)])


def agent_cmd(plan: scripted.FaultPlan) -> list[str]:
    return [sys.executable, "-m", "git_pf.testing.scripted", "agent", "--task-seed", str(plan.seed)]


def oracle_cmd(plan: scripted.FaultPlan) -> str:
    return shlex.join([sys.executable, "-m", "git_pf.testing.scripted", "check", "--task-seed", str(plan.seed)])


def top3(steps: list[dict]) -> list[int]:
    """The three steps with the highest flip rate, ties broken toward later steps (no rate: lowest)."""
    ranked = sorted(steps, key=lambda row: (-1.0 if row.get("rate") is None else row["rate"], row["step"]),
                    reverse=True)
    return [row["step"] for row in ranked[:3]]


def run_case(plan: scripted.FaultPlan, *, k: int, jobs: int, perturb: str, seed: int, mount: bool = False) -> dict:
    """Record ``plan``'s run in a fresh repository, blame it with ``perturb`` and with ``none``."""
    from ..repo import Repo
    from ..testing.fakellm import FakeLLM
    from ..runs.record import record
    from .engine import BlameOptions, blame

    with tempfile.TemporaryDirectory(prefix="pf-blame-validate-") as tmp:
        repo, _ = Repo.init(Path(tmp) / "repo")
        world = Path(tmp) / "world"
        world.mkdir()
        (world / scripted.TASK).write_bytes(scripted.task_json(plan.seed))
        with FakeLLM(scripted.ScriptedModel(plan)) as fake:
            run = record(repo, agent_cmd(plan), name="case", fs_root=world, upstreams=[fake.url])
            if run.exit != 0 or run.steps != plan.steps or run.upstream_error:
                raise PfError(f"task {plan.seed}: the recording did not finish ({run.steps} of {plan.steps} steps, "
                              f"agent exit {run.exit}{', ' + run.upstream_error if run.upstream_error else ''})",
                              EXIT_NEGATIVE)
            found = {}
            for name, how in (("blame", perturb), ("control", "none")):
                opts = BlameOptions(oracle=oracle_cmd(plan), k=k, perturb=how, jobs=jobs, upstreams=[fake.url],
                                    name=name, seed=seed, min_valid=min(k, 3), mount=mount)
                found[name] = blame(repo, "case", agent_cmd(plan), opts)
    summary, control = found["blame"], found["control"]
    best = top3(summary["steps"])
    return dict(plan.to_json(), blamed=summary["decisive"], top3=best, top1_hit=summary["decisive"] == plan.step,
                top3_hit=plan.step in best, control_decisive=control["decisive"],
                rates={str(row["step"]): row["rate"] for row in summary["steps"]},
                baseline=summary.get("baseline"))


def _accuracy(hits: int, n: int) -> dict:
    from .stats import wilson

    return {"hits": hits, "n": n, "rate": hits / n if n else None, "wilson": list(wilson(hits, n)) if n else None}


def tally(rows: list[dict]) -> dict:
    """Top-1 and top-3 accuracy per fault class and overall, and the negative control."""
    def acc(group: list[dict]) -> dict:
        return {"cases": len(group), "top1": _accuracy(sum(r["top1_hit"] for r in group), len(group)),
                "top3": _accuracy(sum(r["top3_hit"] for r in group), len(group))}

    by_fault = {f: acc([r for r in rows if r["fault"] == f]) for f in scripted.FAULTS
                if any(r["fault"] == f for r in rows)}
    clean = sum(r["control_decisive"] is None for r in rows)
    return {"by_fault": by_fault, "overall": acc(rows),
            "control": {"cases": len(rows), "none": clean, "fraction_none": clean / len(rows) if rows else None,
                        "holds": clean == len(rows)}}


def _fmt(a: dict) -> str:
    if not a["n"]:
        return "-"
    lo, hi = a["wilson"]
    return f"{a['hits']}/{a['n']} {a['rate']:.2f} [{lo:.2f}, {hi:.2f}]"


def human(result: dict) -> str:
    lines = [f"blame validation: {result['cases']} cases, K={result['k']}, --perturb {result['perturb']}, "
             f"seed {result['seed']}",
             f"{'case':>4}  {'task':>6}  {'fault':<20}  {'steps':>5}  {'fault at':>8}  {'blamed':>6}  "
             f"{'top-3':<8}  control"]
    for i, r in enumerate(result["rows"], 1):
        lines.append(f"{i:>4}  {r['seed']:>6}  {r['fault']:<20}  {r['steps']:>5}  {r['fault_step']:>8}  "
                     f"{r['blamed'] if r['blamed'] is not None else '-':>6}  {','.join(map(str, r['top3'])):<8}  "
                     f"{'none' if r['control_decisive'] is None else 'step %d' % r['control_decisive']}")
    lines.append(f"{'fault class':<20}  {'cases':>5}  {'top-1 (95% Wilson)':<26}  top-3 (95% Wilson)")
    for name, a in [*result["by_fault"].items(), ("overall", result["overall"])]:
        lines.append(f"{name:<20}  {a['cases']:>5}  {_fmt(a['top1']):<26}  {_fmt(a['top3'])}")
    c = result["control"]
    lines.append(f"negative control (--perturb none): {c['none']}/{c['cases']} cases with no decisive step: "
                 + ("holds" if c["holds"] else "FAILS"))
    return "\n".join(lines)


def validate(*, cases: int, k: int, jobs: int = 1, seed: int = 0, perturb: str = "resample",
             progress=None) -> dict:
    """Run the validation; the numbers (``rows``: one per case; ``by_fault``, ``overall``, ``control``)."""
    if cases < 1:
        raise UsageError("--cases must be 1 or more")
    if k < 1:
        raise UsageError("-k must be 1 or more")
    if jobs < 1:
        raise UsageError("--jobs must be 1 or more")
    if seed < 0:
        raise UsageError("--seed must be 0 or more")
    if perturb == "none":
        raise UsageError("--validate needs a perturbation that changes a response (the control runs --perturb none)")
    from .perturb import load

    load(perturb)  # an unknown one is bad input before any case runs
    rows = []
    for c in range(cases):
        plan = case_plan(seed, c)
        rows.append(run_case(plan, k=k, jobs=jobs, perturb=perturb, seed=seed))
        if progress is not None:
            progress(c + 1, cases, rows[-1])
    return dict({"cases": cases, "k": k, "perturb": perturb, "seed": seed, "rows": rows}, **tally(rows))


def main_validate(repo=None, *, cases: int, k: int, jobs: int = 1, seed: int = 0, perturb: str = "resample",
                  as_json: bool = False, out=None, err=None) -> int:
    """The command's body: print the numbers (human or JSON); exit 0 when the negative control holds.
    ``repo`` is not used (every case has a repository of its own)."""
    out, err = out or sys.stdout, err or sys.stderr

    def say(done: int, total: int, row: dict) -> None:
        print(f"git pf: case {done}/{total}: {row['fault']} at step {row['fault_step']} of {row['steps']}, "
              f"blamed {row['blamed'] if row['blamed'] is not None else 'none'}", file=err, flush=True)

    result = validate(cases=cases, k=k, jobs=jobs, seed=seed, perturb=perturb, progress=None if as_json else say)
    print(json.dumps(result, indent=2, sort_keys=True) if as_json else human(result), file=out, flush=True)
    if not result["control"]["holds"]:
        print("git pf: error: the negative control failed: --perturb none blamed a step", file=err)
        return EXIT_NEGATIVE
    return EXIT_OK
