"""``git pf run``: go on live from a fork's changed step, recording new steps on its branch.

``RunOn`` is the proxy backend: the prefix (steps 1..N of the fork, step N
with its changed response) is served like a replay, matched by request
identity; once it is all served every request is forwarded and recorded by
a ``Recorder`` whose ``StepWriter`` continues the branch from step N (its
trace starting from the fork tip's). The world starts as step 0's world,
checked out into a fresh directory, so the agent rebuilds step N's world by
redoing the prefix as a replay does, and the world is checked at each prefix
step; ``resume_world`` starts in step N's world instead, unchecked. The hook
serves the prefix's draws and effects, then goes live. A run whose prefix
failed (a mismatch, a world divergence) writes nothing: the branch stays as
it was (docs/record.md, "Commands").
"""
from __future__ import annotations

import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

from ..image import manifest as img
from ..core.errors import UsageError
from .record import Recorder, RunResult, drive, world_env
from .replay import MISMATCH_STATUS, Replayer
from .proxy import Proxy, Reply, Request


class RunOn:
    """The prefix from the tape, then live."""

    def __init__(self, replayer: Replayer, recorder: Recorder):
        self.replayer = replayer
        self.recorder = recorder

    def handle(self, request: Request, reply: Reply) -> None:
        if self.replayer.mismatch is not None or self.replayer.world is not None:  # stopping: never live
            return reply.error(MISMATCH_STATUS, "git-pf run: the prefix failed; the run is stopping", "replay_mismatch")
        if self.replayer.exhausted:
            return self.recorder.handle(request, reply)
        self.replayer.handle(request, reply)


def prefix_where(step: int, fork_step: int) -> str:
    """Where a prefix problem at ``step`` lies against the fork's step."""
    return ("before" if step < fork_step else "at" if step == fork_step else "after") + " the fork's step"


@dataclass(frozen=True)
class RunWorld:
    """How a run goes on from a fork (``run``'s flags, and each blame trial's): in step 0's world
    (the default) or, with ``resume_world``, the fork step's; each prefix step's world checked
    (``world_check``); the world shown at the path it was recorded in, and the git directories it
    links to private (``isolate``)."""

    resume_world: bool = False
    world_check: bool = True
    isolate: bool = True

    def kwargs(self) -> dict:
        return {"resume_world": self.resume_world, "world_check": self.world_check, "isolate": self.isolate}


def run(repo, branch: str, cmd: list[str], *, upstreams: list[str] = (), fs_root: Path | None = None,
        inject: bool = True, world: Path | None = None, stop: threading.Event | None = None,
        sticky: list[dict] = (), on_live=None, output=None, resume_world: bool = False,
        world_check: bool = True, ignore=(), isolate: bool = True, group: bool = False,
        worlds=None) -> tuple[RunResult, object]:
    """Run CMD from BRANCH's tip on; the result and the prefix replayer (its ``mismatch``, its
    world divergence ``world`` and the ``fork_step``).

    BRANCH may be a full ref under ``refs/pf/`` (a blame trial's). ``world``: a directory that
    already holds the start world (step 0's; with ``resume_world`` the tip's), a mount, instead of a
    fresh checkout. ``world_check``: the world must be each prefix step's as recorded. ``stop``: set it to end
    the child. ``sticky``: recorded exchanges after the fork's step, served while the requests
    match them (the sticky tail). ``on_live(entry)``: each exchange the upstream answered.
    ``output``: where the child's stdout and stderr go (default: ours). ``ignore``: matching rules
    (``matching.Rules`` or ``--ignore-field`` paths) besides those stored with the run. ``group``: CMD in a
    process group of its own, killed when it exits (a blame trial's, whose world the next one reuses).
    ``worlds``: a cache of worlds (``executors.worlds.WorldCache``) the start world is taken from and
    given back to when neither ``world`` nor ``fs_root`` is given (CMD then in a group of its own)."""
    from . import child
    from .forward import Upstreams
    from .replaying import cached_world, fresh_world, isolation, new_world_dir, plan_of
    from .steps import check_target, target_tip

    git = repo.git
    check_target(branch)
    if target_tip(git, branch) is None:
        raise UsageError(f"no branch '{branch}' (run goes on from a branch made by 'git pf fork --at-step')")
    plan = plan_of(repo, branch)
    ups = Upstreams.from_repo(git, list(upstreams))
    child.start_check(cmd, os.environ)
    start = plan.start_image if resume_world else plan.first
    # refused here, before anything is written (a temporary world's directory made first, to check there)
    check = lambda at: isolation(git, plan.first, start, isolate, at)
    if world is None and fs_root is None and worlds is not None:
        with cached_world(worlds, start, check) as (world, place, _):
            return _run(repo, plan, branch, cmd, ups, world, place, inject, stop, sticky, on_live, output,
                        resume_world, world_check, ignore, True)
    if world is None and fs_root is None:
        fs_root, place = new_world_dir(check)
    else:
        place = check(world if world is not None else fs_root)
    world = Path(world).resolve() if world is not None else fresh_world(repo, start, fs_root)
    return _run(repo, plan, branch, cmd, ups, world, place, inject, stop, sticky, on_live, output, resume_world,
                world_check, ignore, group)


def _run(repo, plan, branch: str, cmd: list[str], ups, world: Path, place: tuple, inject: bool, stop, sticky,
         on_live, output, resume_world: bool, world_check: bool, ignore, group: bool) -> tuple[RunResult, object]:
    from . import inject as inject_mod
    from .channel import write_replay_file
    from ..layers.trace import messages as trace
    from .replaying import isolated_cmd, ledger_blobs
    from .steps import StepWriter
    from .stepworld import WorldCheck

    git = repo.git
    last = max(plan.entries, key=lambda e: e["step"])
    stop = stop or threading.Event()
    checker = WorldCheck(repo, world, plan.tip) if world_check and not resume_world else None
    replayer = Replayer(plan.entries, ignore=ignore, stop=stop, world_check=checker)
    replayer.fork_step = plan.fork_step or last["step"]
    messages = trace.decode(img.read_file(git, img.read_image(git, plan.tip).tree, img.TRACE_MESSAGES) or b"")
    writer = StepWriter(repo, branch, world, parent=plan.tip, start_step=last["step"], tape=plan.entries,
                        ledger=plan.ledger, messages=messages)
    try:
        recorder = Recorder(writer, ups, first_arrival=max(e["arrival"] for e in plan.entries) + 1,
                            sticky=Replayer(list(sticky), ignore=ignore) if sticky else None, on_live=on_live,
                            rules=replayer.ignore)
        with tempfile.TemporaryDirectory(prefix="pf-run-") as tmp:
            replay_file = Path(tmp) / "replay.json"
            write_replay_file(replay_file, draws=plan.draws, effects=plan.ledger, allow_effects=False, mode="run",
                              blobs=ledger_blobs(git, plan.ledger))
            with Proxy(RunOn(replayer, recorder)) as proxy:
                env = inject_mod.child_env(world_env(dict(os.environ), proxy, world), mode="run",
                                           channel=writer.channel, replay_file=replay_file, inject=inject)
                code = drive(isolated_cmd(cmd, world, place, env, Path(tmp)), env, recorder, stop, output=output,
                             group=group)
        failed = (replayer.mismatch is not None or replayer.world is not None) and recorder.steps == 0
        tip = plan.tip if failed else writer.finish(code).id  # a run that never went on writes nothing
    finally:
        writer.close()
        if checker is not None:
            checker.close()
    result = RunResult.of(branch, tip, recorder, code, proxy, writer)
    return result, replayer
