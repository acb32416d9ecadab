"""A blame trial as a cluster task (docs/scale.md): what it carries, and how a worker runs it.

``TrialTask`` holds commit ids, the remote's ``RemoteSpec``, the trial's
parameters and the agent command: nothing of the driver's machine. A cluster
task is a chunk of them: ``run_trials`` runs on a worker; it fetches the run's
``meta`` (whose parent is the blamed tip, so the run's images come with it) and
the verdicts of the chunk's steps into the node's cache repository, once; a
verdict the remote has already is returned as it is (a retried or resumed task
does not run its trial again). The others run one after another
(``trials.run_trial``) in the cache, and their verdicts go in one push to
``refs/pf/blame/<run>/step-<N>/<k>``, each never forced. ``verdict_row`` reads a
verdict commit back as the driver's progress line needs it.
"""
from __future__ import annotations

from dataclasses import dataclass

import pygit2

from ..image import manifest as img
from ..core.errors import DataError
from ..executors import node
from ..executors.worlds import ReusedWorld
from ..runs.replaying import plan_of
from ..runs.runon import RunWorld
from . import perturb, store, trials
from .cost import Meter, Prices
from .grade import Grader

CHUNK = 8  # the most trials one cluster task runs (and pushes at once): a dead worker loses no more


@dataclass(frozen=True)
class TrialTask:
    remote: node.RemoteSpec
    run: str
    tip: str  # the blamed run's last image
    trials: tuple[tuple[int, int], ...]  # (step, k) of each trial the task runs
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


def run_trials(task: TrialTask) -> list[dict]:
    """A chunk of one blame run's trials on this worker, one cluster task: each trial's row plus
    ``ran`` (False: its verdict was on the remote, found, not run). One fetch of the run and its
    steps' verdicts, the trials not done run one after another, then one push of all their verdicts,
    each ref never forced; a verdict another attempt pushed first stands, read back. Trials that
    finished before one raised are still pushed, then the error goes on."""
    store.check_run(task.run)
    repo = node.cache(task.remote)
    git = repo.git
    here = f"{node.TRACKING}blame/{task.run}/"
    node.fetch(repo, [f"+{store.meta_ref(task.run)}:{here}meta",
                      *(f"+{store.ROOT}{task.run}/step-{s}/*:{here}step-{s}/*" for s in sorted({s for s, _ in task.trials}))])
    found = lambda step, k: node.tracked(repo, f"blame/{task.run}/step-{step}/{k}")
    rows: list = [None] * len(task.trials)
    todo = []
    for i, (step, k) in enumerate(task.trials):
        if found(step, k) is not None:
            rows[i] = dict(verdict_row(git, found(step, k)), ran=False)
        else:
            todo.append(i)
    if not todo:
        return rows
    if task.tip not in git:
        raise DataError(f"blame run '{task.run}': the remote's meta does not reach the run {task.tip[:12]}")
    entries = sorted(plan_of(repo, task.tip).entries, key=lambda e: e["step"])
    setup = trials.Setup(task.run, task.tip, entries, list(task.cmd), task.perturb, perturb.load(task.perturb),
                         task.seed, task.grader.check(), list(task.upstreams), Meter(Prices(git), None),
                         trials.fuse_available() if task.mount is None else task.mount, task.ignore, task.how)
    ran = []
    try:
        with ReusedWorld(repo) as worlds:  # one world directory for the chunk's trials
            for i in todo:
                rows[i] = trials.run_trial(repo, setup, *task.trials[i], worlds)
                ran.append(i)
    finally:
        to = {i: store.verdict_ref(task.run, *task.trials[i]) for i in ran}
        pushed = node.publish_many(repo, node.origin(repo, task.remote), [(rows[i]["commit"], to[i], None) for i in ran])
    refused = [i for i in ran if not pushed[to[i]]]
    if refused:  # another attempt's verdict won: it stands
        node.fetch(repo, [f"+{to[i]}:{here}step-{task.trials[i][0]}/{task.trials[i][1]}" for i in refused])
    for i in ran:
        rows[i] = dict(verdict_row(git, found(*task.trials[i])), ran=False) if i in refused else dict(rows[i], ran=True)
    return rows
