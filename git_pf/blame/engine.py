"""The blame of a failed run (docs/blame.md): K trials at each step, graded, kept, summed up.

``blame`` checks the settings, grades the baseline (the recorded run itself
must fail), estimates the cost (refused above the budget before anything is
written), writes the run's ``meta`` and runs the trials not finished yet, up to
``jobs`` at a time, each in its own world (``trials``), or as tasks on a Ray
cluster (``executor="ray"``, ``cluster``: the meta is pushed to the remote
first, the workers push their verdicts there, and they are fetched back
before the summary is read). A blame run that exists
is resumed: its finished trials are kept, its settings must be the same. The
spend meter stops the trials at the budget (exit 1; the same command resumes).
Returns ``store.summary`` plus ``resumed``. Writes refs under
``refs/pf/blame/<run>/`` only.
"""
from __future__ import annotations

import math
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pygit2

from .. import executors
from ..image import refs
from ..core.errors import EXIT_NEGATIVE, PfError, UsageError
from ..runs import child
from ..runs.replaying import fresh_world, isolation, plan_of, remove_world
from ..runs.runon import RunWorld
from ..runs.steps import at_step
from ..runs.stepworld import step_images, world_tree
from ..executors import node
from ..executors.worlds import ReusedWorld
from ..transport import gitcmd, remotes
from . import cluster, perturb, store, trials as trials_mod
from .cost import Meter, Prices, estimate, rerun_steps
from .grade import FAIL, Grader

# The settings of a blame run: a resumed run must have the same ones.
SETTINGS = ("rev", "k", "steps", "perturb", "grade", "null_rate", "alpha", "seed", "min_valid", "resume_world")


@dataclass
class BlameOptions:
    oracle: str | None = None
    success_re: str | None = None
    failure_re: str | None = None
    k: int = 5
    steps: tuple[int, int] | None = None
    perturb: str = "text"
    budget_usd: float | None = None
    jobs: int = 1
    upstreams: list[str] = ()
    name: str | None = None
    null_rate: float = 0.1
    alpha: float = 0.05
    seed: int = 0
    oracle_timeout_s: float = 300.0
    min_valid: int = 3
    mount: bool | None = None
    ignore: object = ()  # matching.Rules (or --ignore-field paths) besides those stored with the run
    executor: str = "local"  # or "ray" (docs/scale.md)
    how: RunWorld = RunWorld()  # each trial's start world (step 0's, or --resume-world), checks, isolation
    ray_address: str | None = None


class Refused(PfError):
    """The blame cannot go on (exit 1): the baseline does not fail, or the budget is reached."""

    code = EXIT_NEGATIVE


def _check(opts: BlameOptions) -> None:
    if not isinstance(opts.k, int) or opts.k < 1:
        raise UsageError(f"-k must be 1 or more, not {opts.k}")
    if not isinstance(opts.jobs, int) or opts.jobs < 1:
        raise UsageError(f"--jobs must be 1 or more, not {opts.jobs}")
    for name, value in (("null rate", opts.null_rate), ("alpha", opts.alpha)):
        if not 0 < value < 1:
            raise UsageError(f"the {name} must be between 0 and 1, not {value}")
    if opts.budget_usd is not None and not (math.isfinite(opts.budget_usd) and opts.budget_usd >= 0):
        raise UsageError(f"--budget must be a number of USD of 0 or more, not {opts.budget_usd}")
    if opts.mount and not trials_mod.fuse_available():
        raise UsageError("mounting needs fusermount3 on PATH and /dev/fuse")


def _steps(opts: BlameOptions, last: int) -> tuple[int, int]:
    first, end = opts.steps or (1, last)
    if not 1 <= first <= end <= last:
        raise UsageError(f"--steps {first}..{end}: the run has steps 1..{last}")
    return first, end


def _baseline(repo, grader: Grader, tip: str, entries: list[dict]) -> dict:
    """The grade of the recorded run itself (its final world, its last exchange)."""
    last = max(entries, key=lambda e: e["step"])
    if grader.oracle is None:
        grade, detail = grader.grade(None, last)
    else:
        tmp = Path(tempfile.mkdtemp(prefix="pf-blame-base-"))
        try:
            grade, detail = grader.grade(fresh_world(repo, tip, tmp / "world"), last)
        finally:
            remove_world(repo, tmp, tmp / "world")
    return {"grade": grade, "detail": detail}


def blame(repo, rev: str, agent_cmd: list[str], opts: BlameOptions, *,
          progress: Callable[[dict], None] | None = None) -> dict:
    """Blame the failed run REV ends (docs/blame.md); the summary dict plus ``resumed``."""
    git = repo.git
    _check(opts)
    ex = executors.make(opts.executor, jobs=opts.jobs, address=opts.ray_address)
    remote = _cluster_remote(repo) if ex.remote else None
    spec = node.RemoteSpec.of(repo, remote) if remote is not None else None
    ex.start()  # connected to the cluster before anything is written
    grader = Grader(opts.oracle, opts.success_re, opts.failure_re, opts.oracle_timeout_s).check()
    fn = perturb.load(opts.perturb)
    tip = refs.resolve(git, rev)
    plan = plan_of(repo, tip)
    entries = sorted(plan.entries, key=lambda e: e["step"])
    first, end = _steps(opts, entries[-1]["step"])
    run = store.check_run(opts.name) if opts.name else store.default_run(git, rev)
    child.start_check(agent_cmd, os.environ)
    # refused here, before anything is written (no meta, no trial): each trial's start world
    steps = step_images(git, tip) if opts.how.resume_world else {}
    starts = [steps.get(s) or at_step(git, tip, s) for s in range(first, end + 1)] if steps else [plan.first]
    for start in {world_tree(git, s): s for s in starts}.values():
        isolation(git, plan.first, start, opts.how.isolate)
    settings = {"rev": tip, "k": opts.k, "steps": [first, end], "perturb": opts.perturb, "grade": grader.spec(),
                "null_rate": opts.null_rate, "alpha": opts.alpha, "seed": opts.seed, "min_valid": opts.min_valid}
    if opts.how.resume_world:  # trials from the fork step's world are other trials: a setting (absent: False)
        settings["resume_world"] = True
    meta = _existing_meta(git, run, settings)
    done = {(t["step"], t["trial"]) for t in store.trials(git, run)} if meta is not None else set()
    every = [(s, k) for s in range(first, end + 1) for k in range(1, opts.k + 1)]
    pending = [t for t in every if t not in done]
    prices = Prices(git)
    resample = opts.perturb == "resample"
    if opts.budget_usd is not None:
        needed = [e for s in range(first, end + 1) for e in rerun_steps(entries, s, resample)]
        missing = prices.missing(needed)
        if missing:
            raise UsageError(f"--budget: no price for model {missing[0]} (set git config pf.price.{missing[0]}.input "
                             f"and .output, or pf.price.default.*, in USD per million tokens)")
    est = estimate(prices, entries, pending, resample)
    if opts.budget_usd is not None and est > opts.budget_usd:
        raise Refused(f"the estimate for {len(pending)} trials is ${est:.4f}, over --budget ${opts.budget_usd:g}; "
                            "nothing was run")
    if meta is None:
        base = _baseline(repo, grader, tip, entries)
        if base["grade"] != FAIL:
            raise Refused(f"the run does not fail ({base['grade']}: {base['detail']}): blame needs a failed run")
        store.write_meta(git, run, dict(settings, v=1, run=run, baseline=base,
                                        estimate_usd=estimate(prices, entries, every, resample)))
    meter = Meter(prices, opts.budget_usd)
    if remote is not None:
        tasks = [cluster.TrialTask(spec, run, tip, chunk, tuple(agent_cmd), opts.perturb, opts.seed, grader,
                                   tuple(opts.upstreams), opts.mount, opts.ignore, opts.how)
                 for chunk in executors.chunks(pending, ex.width(), cluster.CHUNK)]
        finished = _on_cluster(repo, remote, ex, run, tasks, progress)
    else:
        setup = trials_mod.Setup(run, tip, entries, list(agent_cmd), opts.perturb, fn, opts.seed, grader,
                                 list(opts.upstreams), meter,
                                 trials_mod.fuse_available() if opts.mount is None else opts.mount, opts.ignore,
                                 opts.how)
        finished = _run_all(repo, setup, pending, ex, progress)
    if meter.tripped.is_set():
        left = len(pending) - finished
        raise Refused(f"the spend reached --budget ${opts.budget_usd:g} (${meter.spent:.4f}) with {left} "
                            f"trials left; run the same command again (a higher --budget) to resume")
    out = store.summary(repo, run)
    out["resumed"] = len(done)
    return out


def _existing_meta(git, run: str, settings: dict) -> dict | None:
    """The meta of blame run ``run`` when it exists here (or on the remote with these settings: then
    adopted, so it resumes here); None for a new run. Another run's settings are refused."""
    fetched = store.read_meta(git, run)
    if store.read_meta(git, run, local=True) is None and fetched is not None \
            and all(fetched.get(k) == settings.get(k) for k in SETTINGS):
        store.adopt(git, run)
    meta = store.read_meta(git, run, local=True)
    if meta is not None:
        differ = [k for k in SETTINGS if meta.get(k) != settings.get(k)]
        if differ:
            raise UsageError(f"blame run '{run}' exists with other settings ({', '.join(differ)}); "
                             f"give the same ones to resume it, or another --name")
    return meta


def _run_all(repo, setup: trials_mod.Setup, pending: list[tuple[int, int]], ex, progress) -> int:
    """Run the pending trials on the local executor (``jobs`` threads); how many finished."""
    local, worlds = threading.local(), []

    def one(trial: tuple[int, int]) -> dict | None:
        if setup.meter.stopping.is_set():
            return None
        if not hasattr(local, "repo"):  # a repository object and a reused world directory per thread
            local.repo = type(repo)(pygit2.Repository(str(repo.git_dir)))
            local.worlds = ReusedWorld(local.repo)
            worlds.append(local.worlds)
        return trials_mod.run_trial(local.repo, setup, *trial, local.worlds)

    def done(row: dict | None) -> None:
        if row is not None and progress is not None:
            progress(row)

    try:
        rows = ex.map(one, pending, on_result=done, on_error=lambda e: setup.meter.halt())
    finally:
        for w in worlds:
            w.close()
    return sum(1 for row in rows if row is not None)


def _cluster_remote(repo) -> remotes.Remote:
    """The remote cluster workers fetch from and push verdicts to: origin, else the only one."""
    if not remotes.names(repo):
        raise UsageError("--executor ray needs a remote the workers can reach (git remote add origin URL)")
    return remotes.resolve(repo, None)


def _on_cluster(repo, remote: remotes.Remote, ex, run: str, tasks: list, progress) -> int:
    """Publish the run's meta (and so the blamed run) to ``remote``, run ``tasks`` (chunks of trials)
    on the cluster, fetch their verdicts back (telling the remote only of the meta, which they all
    grew from); how many trials finished."""
    git = repo.git
    if not node.publish(repo, remote, refs.ref_tip(git, store.meta_ref(run)), store.meta_ref(run)):
        raise UsageError(f"blame run '{run}' exists on remote '{remote.arg}' with another meta; "
                         f"give another --name")
    rows = [row for chunk in ex.map(cluster.run_trials, tasks,
                                    on_result=None if progress is None else lambda got: [progress(r) for r in got])
            for row in chunk]
    gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--refmap=", "--quiet", "--no-write-fetch-head",
                              f"--negotiation-tip={refs.ref_tip(git, store.meta_ref(run))}", remote.arg,
                              f"{store.ROOT}{run}/step-*:{store.ROOT}{run}/step-*"], cwd=repo.git.workdir or repo.git_dir)
    return len(rows)
