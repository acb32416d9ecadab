"""One blame trial (docs/blame.md, "Method"): fork at a step with a perturbed response, run the
rest of the run again, grade it, write its verdict.

The fork goes to ``refs/pf/blame/<run>/work/step-<N>/<k>``
(``runs.forking.fork_at_step``); the run on (``runs.runon.run``) serves the
recorded exchanges after step N while the agent asks exactly what it asked
(the sticky tail), then goes live, and writes every step on that ref. The
agent starts in step 0's world and redoes the prefix from the tape (its world
checked at each step). That world is a copy-on-write mount of the run's step 0 (``git pf mount --rw``, run
as a command: the mount daemon is the CLI's to import), gone when the trial
ends, or, without FUSE, the world directory of the worker
(``executors.worlds.ReusedWorld``): the trials a worker runs one after another
start from the same image's world, so the first is checked out and each next
one gets it back as a fresh checkout leaves it, by moving only what the trial
before changed (docs/scale.md, "One world per worker"). The agent runs in a
process group of its own, killed when it exits, so nothing it left running
changes the next trial's world. A trial stopped by the spend meter writes no
verdict: it is not finished.
Writes refs under ``refs/pf/blame/<run>/`` only.
"""
from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import PfError
from ..executors.worlds import ReusedWorld
from ..layers.trace import exchange, tape as tape_mod
from ..runs.llm import wire
from ..runs import forking, runon
from ..runs.forward import Upstreams, UpstreamDown, forward
from ..runs.proxy import Request
from ..runs.replaying import fresh_world, remove_world
from ..runs.steps import at_step
from . import grade as grade_mod, perturb, store
from .cost import Meter


def fuse_available() -> bool:
    """Whether this machine can mount (as ``git pf mount`` needs it)."""
    return shutil.which("fusermount3") is not None and Path("/dev/fuse").exists()


def _pf(repo, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "git_pf", *args], cwd=repo.git_dir, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL)


@contextmanager
def trial_world(repo, image: str, mount: bool, worlds: ReusedWorld | None = None):
    """The world of ``image`` for the block: a copy-on-write mount in a fresh directory, or the
    directory ``worlds`` reuses (brought back to a fresh checkout of ``image``), or a checkout."""
    if not mount and worlds is not None:
        yield worlds.enter(image)
        return
    tmp = Path(tempfile.mkdtemp(prefix="pf-blame-"))
    world = tmp / "world"
    try:
        if mount:
            world.mkdir()
            proc = _pf(repo, "mount", "--rw", image, str(world))
            if proc.returncode != 0:
                raise PfError(f"cannot mount the trial's world: {(proc.stderr.strip().splitlines() or ['?'])[-1]}", 1)
            try:
                yield world
            finally:
                _pf(repo, "umount", "--discard", str(world))
        else:
            yield fresh_world(repo, image, world)
    finally:
        remove_world(repo, tmp, world)


class _Sink:
    """A proxy ``Reply`` that goes nowhere: a resampled response is only kept."""

    started = False

    def whole(self, status, headers, body) -> None:
        self.started = True

    def start(self, status, headers) -> None:
        self.started = True

    def chunk(self, data) -> None:
        pass

    def end(self) -> None:
        pass


def resample(entry: dict, upstreams: Upstreams) -> dict:
    """``entry`` with the answer the upstream gives its recorded request now."""
    req = entry["request"]
    request = Request(req["method"], req["path"], req.get("query") or "", list((req.get("headers") or {}).items()),
                      exchange.body_bytes(req.get("body")), req.get("family"))
    try:
        response = forward(upstreams.for_request(entry.get("api", "other"), request), request, _Sink())
    except UpstreamDown as e:
        raise PfError(f"resample of step {entry['step']}: {e}", 1) from None
    return dict(entry, response=response)


@dataclass
class Setup:
    """What every trial of one blame shares."""

    run: str
    rev: str  # the blamed run's tip
    entries: list[dict]  # its recorded exchanges
    cmd: list[str]
    perturb_spec: str
    perturb_fn: object  # perturb.Perturb, None for resample
    seed: int
    grader: grade_mod.Grader
    upstreams: list[str]
    meter: Meter
    mount: bool
    ignore: object = ()  # matching rules given on the command line (the run's own come with its tape)
    how: runon.RunWorld = runon.RunWorld()  # where each trial starts, whether its world is checked and isolated


def reply_change(spec: str, fn, seed: int, step: int, k: int, ups: Upstreams, on_resample=None):
    """The ``entry_change`` of fork ``k`` at ``step``: the reply perturbed as ``spec`` says (``fn``:
    ``perturb.load(spec)``, None for resample, whose new entry goes to ``on_resample``)."""
    def apply(entry: dict) -> dict:
        if spec == "none":
            return entry
        if fn is None:
            new = resample(entry, ups)
            if on_resample is not None:
                on_resample(new)
            return new
        rng = perturb.rng_for(seed, step, k)
        return wire.with_reply(entry, perturb.apply(fn, wire.reply_text(entry), rng, spec))
    return apply


def change(setup: Setup, step: int, k: int, ups: Upstreams, spent: list[float]):
    """The ``entry_change`` of the fork of trial ``k`` at ``step`` (a resample's cost metered)."""
    def metered(new: dict) -> None:
        spent[0] += setup.meter.add(new)
    return reply_change(setup.perturb_spec, setup.perturb_fn, setup.seed, step, k, ups, metered)


def run_trial(repo, setup: Setup, step: int, k: int, worlds: ReusedWorld | None = None) -> dict | None:
    """Run trial ``k`` at ``step``; its verdict row, or None when the spend meter stopped it.
    ``worlds``: the world directory this worker's trials reuse (without it, one of the trial's own)."""
    git = repo.git
    ups = Upstreams.from_repo(git, list(setup.upstreams))
    spent = [0.0]
    ref = store.work_ref(setup.run, step, k)
    fork = forking.fork_at_step(repo, setup.rev, step, entry_change=change(setup, step, k, ups, spent), ref=ref)
    stop = threading.Event()
    setup.meter.watch(stop)

    def on_live(entry: dict) -> None:
        spent[0] += setup.meter.add(entry)

    try:
        start = fork.id if setup.how.resume_world else at_step(git, fork.id, 0)
        with trial_world(repo, start, setup.mount, worlds) as world:
            sticky = [e for e in setup.entries if e["step"] > step]
            result, prefix = runon.run(repo, ref, setup.cmd, upstreams=setup.upstreams, world=world, stop=stop,
                                       sticky=sticky, on_live=on_live, output=subprocess.DEVNULL,
                                       ignore=setup.ignore, group=True, **setup.how.kwargs())
            if setup.meter.stopping.is_set():
                return None
            outcome, reason = _outcome(git, setup.grader, world, result, prefix)
    finally:
        setup.meter.unwatch(stop)
    commit = store.write_verdict(git, setup.run, step, k, result.tip, outcome, reason, spent[0])
    return {"step": step, "trial": k, "outcome": outcome, "reason": reason, "commit": commit, "tip": result.tip,
            "cost_usd": spent[0]}


def _outcome(git, grader: grade_mod.Grader, world: Path, result, prefix) -> tuple[str, str]:
    """(flip | no-flip | undefined, why) of a finished trial whose baseline failed."""
    if prefix.mismatch is not None or prefix.world is not None:
        problem = prefix.mismatch or prefix.world
        what = "asked otherwise" if prefix.mismatch is not None else "left another world"
        return "undefined", f"the agent {what} {runon.prefix_where(problem.step, prefix.fork_step)}: {problem.line}"
    if result.upstream_error or result.failures:
        return "undefined", result.upstream_error or f"internal proxy error: {result.failures[0]}"
    from ..image.manifest import read_image

    tip = read_image(git, result.tip)
    last = max((e for e in tape_mod.read(git, tip.tree) if e.get("kind") == "exchange"),
               key=lambda e: e.get("step", 0), default=None)
    grade, detail = grader.grade(world, last)
    outcome = {"success": "flip", "fail": "no-flip"}.get(grade, "undefined")
    return outcome, f"{detail}; the agent exited {result.exit}"
