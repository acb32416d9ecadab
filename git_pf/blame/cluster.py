"""A blame trial as a cluster task (docs/scale.md): what it carries, and how a worker runs it.

``TrialTask`` holds commit ids, the remote's ``RemoteSpec``, the trial's
parameters and the agent command: nothing of the driver's machine. ``run_task``
runs on a worker: it fetches the run's ``meta`` (whose parent is the blamed
tip, so the run's images come with it) and the verdicts of its step into the
node's cache repository; a verdict the remote has already is returned as it
is (a retried or resumed task does not run its trial again). Otherwise it runs
the trial (``trials.run_trial``) in the cache and pushes the verdict to
``refs/pf/blame/<run>/step-<N>/<k>``, never forced. ``verdict_row`` reads a
verdict commit back as the driver's progress line needs it.
"""
from __future__ import annotations

from dataclasses import dataclass

import pygit2

from ..image import manifest as img
from ..core.errors import DataError
from ..executors import node
from ..runs.replaying import plan_of
from ..runs.runon import RunWorld
from . import perturb, store, trials
from .cost import Meter, Prices
from .grade import Grader


@dataclass(frozen=True)
class TrialTask:
    remote: node.RemoteSpec
    run: str
    tip: str  # the blamed run's last image
    step: int
    k: int
    cmd: tuple[str, ...]
    perturb: str
    seed: int
    grader: Grader
    upstreams: tuple[str, ...] = ()
    mount: bool | None = None  # None: a mount where the node has FUSE, else a checkout
    ignore: object = ()
    how: RunWorld = RunWorld()


def verdict_row(git, commit: str) -> dict:
    c = git.get(commit)
    if not isinstance(c, pygit2.Commit):
        raise DataError(f"the verdict {commit[:12]} is not a commit")
    t = dict(img.parse_trailers(c.message))
    try:  # it may come from the remote: checked as store.trials checks it
        step, trial, cost = int(t[store.T_STEP]), int(t[store.T_TRIAL]), float(t.get(store.T_COST, "0"))
    except (KeyError, ValueError):
        raise DataError(f"the verdict {commit[:12]} has no readable trailers") from None
    if t.get(store.T_OUTCOME) not in store.OUTCOMES:
        raise DataError(f"the verdict {commit[:12]} has no known outcome")
    return {"step": step, "trial": trial, "outcome": t[store.T_OUTCOME], "reason": t.get(store.T_REASON, ""),
            "commit": commit, "tip": str(c.parent_ids[0]) if c.parent_ids else None, "cost_usd": cost}


def run_task(task: TrialTask) -> dict:
    """Run (or find) the verdict of one trial on this worker; its row plus ``ran`` (False: found)."""
    store.check_run(task.run)
    repo = node.cache(task.remote)
    git = repo.git
    here = f"{node.TRACKING}blame/{task.run}/"
    node.fetch(repo, [f"+{store.meta_ref(task.run)}:{here}meta",
                      f"+{store.ROOT}{task.run}/step-{task.step}/*:{here}step-{task.step}/*"])
    done = node.tracked(repo, f"blame/{task.run}/step-{task.step}/{task.k}")
    if done is not None:
        return dict(verdict_row(git, done), ran=False)
    if task.tip not in git:
        raise DataError(f"blame run '{task.run}': the remote's meta does not reach the run {task.tip[:12]}")
    entries = sorted(plan_of(repo, task.tip).entries, key=lambda e: e["step"])
    fn = perturb.load(task.perturb)
    setup = trials.Setup(task.run, task.tip, entries, list(task.cmd), task.perturb, fn, task.seed,
                         task.grader.check(), list(task.upstreams), Meter(Prices(git), None),
                         trials.fuse_available() if task.mount is None else task.mount, task.ignore, task.how)
    row = trials.run_trial(repo, setup, task.step, task.k)
    if not node.publish(repo, node.origin(repo, task.remote), row["commit"], store.verdict_ref(task.run, task.step, task.k)):
        node.fetch(repo, [f"+{store.verdict_ref(task.run, task.step, task.k)}:{here}step-{task.step}/{task.k}"])
        theirs = node.tracked(repo, f"blame/{task.run}/step-{task.step}/{task.k}")
        return dict(verdict_row(git, theirs), ran=False)  # another attempt's verdict won: it stands
    return dict(row, ran=True)
