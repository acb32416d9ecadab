"""``git pf run``: go on live from a fork's changed step, recording new steps on its branch.

``RunOn`` is the proxy backend: the prefix (steps 1..N of the fork, step N
with its changed response) is served like a replay, matched by request
identity; once it is all served every request is forwarded and recorded by
a ``Recorder`` whose ``StepWriter`` continues the branch from step N. The
world starts as step N's world, checked out into a fresh directory; the
hook serves the prefix's draws and effects, then goes live
(docs/record.md, "Commands").
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from ..errors import UsageError
from .record import Recorder, RunResult, drive, world_env
from .replay import MISMATCH_STATUS, Replayer
from .proxy import Proxy, Reply, Request


class RunOn:
    """The prefix from the tape, then live."""

    def __init__(self, replayer: Replayer, recorder: Recorder):
        self.replayer = replayer
        self.recorder = recorder

    def handle(self, request: Request, reply: Reply) -> None:
        if self.replayer.exhausted:
            return self.recorder.handle(request, reply)
        self.replayer.handle(request, reply)


def run(repo, branch: str, cmd: list[str], *, upstreams: list[str] = (), fs_root: Path | None = None,
        inject: bool = True, world: Path | None = None, stop: threading.Event | None = None,
        sticky: list[dict] = (), on_live=None, output=None) -> tuple[RunResult, object]:
    """Run CMD from BRANCH's tip on; the result and the prefix replayer (for its mismatch).

    BRANCH may be a full ref under ``refs/pf/`` (a blame trial's). ``world``: a directory that
    already holds the tip's world (a mount) instead of a fresh checkout. ``stop``: set it to end
    the child. ``sticky``: recorded exchanges after the fork's step, served while the requests
    match them (the sticky tail). ``on_live(entry)``: each exchange the upstream answered.
    ``output``: where the child's stdout and stderr go (default: ours)."""
    from . import child, inject as inject_mod
    from .channel import write_replay_file
    from .forward import Upstreams
    from .replaying import fresh_world, plan_of
    from .steps import StepWriter, check_target, target_tip

    git = repo.git
    check_target(branch)
    if target_tip(git, branch) is None:
        raise UsageError(f"no branch '{branch}' (run goes on from a branch made by 'git pf fork --at-step')")
    plan = plan_of(repo, branch)
    ups = Upstreams.from_repo(git, list(upstreams))
    child.start_check(cmd, os.environ)
    world = Path(world).resolve() if world is not None else fresh_world(repo, plan.start_image, fs_root)
    last = max(plan.entries, key=lambda e: e["step"])
    stop = stop or threading.Event()
    replayer = Replayer(plan.entries, stop=stop)
    writer = StepWriter(repo, branch, world, parent=plan.tip, start_step=last["step"], tape=plan.entries,
                        ledger=plan.ledger)
    try:
        recorder = Recorder(writer, ups, first_arrival=max(e["arrival"] for e in plan.entries) + 1,
                            sticky=Replayer(list(sticky)) if sticky else None, on_live=on_live)
        with tempfile.TemporaryDirectory(prefix="pf-run-") as tmp:
            replay_file = Path(tmp) / "replay.json"
            write_replay_file(replay_file, draws=plan.draws, effects=plan.ledger, allow_effects=False, mode="run")
            with Proxy(RunOn(replayer, recorder)) as proxy:
                env = inject_mod.child_env(world_env(dict(os.environ), proxy, world), mode="run",
                                           channel=writer.channel, replay_file=replay_file, inject=inject)
                code = drive(cmd, env, recorder, stop, output=output)
        info = writer.finish(code)
    finally:
        writer.close()
    result = RunResult(branch, info.id, recorder.steps, code, recorder.failure(), list(proxy.failures))
    return result, replayer
