"""The replay operation: world, draws and tape handed back to the agent, and the bit-exact report.

``replay`` checks out the run's first step into a fresh directory (the child
finds it in ``GIT_PF_WORLD``; a temporary one is removed when the replay
ends, also on an interrupt, unless it is to be kept), writes the recorded draws and effects for the
in-process hook (``inject``, ``channel``), serves the tape through a
``Replayer`` and watches the channel: a divergence of draws or effects, like
a request mismatch, stops the child. The world is checked at every step
(``stepworld.WorldCheck``) and once more when the child exits, against the
run's final image. ``ReplayReport`` says what held (docs/record.md,
"Commands"). Writes no images (the world check writes the objects of what
it captures).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EXIT_NEGATIVE, EXIT_USAGE, PfError, UsageError
from .replay import Mismatch, Replayer

DIVERGED_EXIT = 86  # the hook's exit on a divergence (docs/record.md, "Draws")


class Watcher:
    """Reads the hook's channel between polls of the child: counts, and the first divergence."""

    def __init__(self, path: Path, stop: threading.Event):
        from .channel import ChannelReader

        self.reader = ChannelReader(path)
        self.stop = stop
        self.consumed: dict | None = None
        self.diverged: dict | None = None
        self.replayed = 0  # ledger entries a CLI agent's hook (Claude Code's) replayed

    def tick(self) -> None:
        for event in self.reader.new_events():
            kind = event.get("t")
            if kind == "consumed":
                self.consumed = event
            elif kind == "replayed":
                self.replayed += 1
            elif kind == "diverged" and self.diverged is None:
                self.diverged = event
                self.stop.set()


def draw_step(entries: list[dict], index: int) -> str:
    """Where draw ``index`` (0-based, arrival order) was made: before which step."""
    seen = 0
    for e in sorted(entries, key=lambda e: e["arrival"]):
        seen += len(e.get("draws") or ())
        if index < seen:
            return f"before step {e['step']}"
    return "after the last step"


@dataclass
class ReplayReport:
    rev: str
    world: str | None  # None: a temporary world, removed
    exit: int
    served: int
    total: int
    draws: tuple[int | None, int]  # (consumed, of); consumed None: unknown (the child was killed)
    effects: tuple[int | None, int]
    mismatch: Mismatch | None
    divergence: str | None
    another_agent: str | None = None
    kept: bool = False  # the world is a temporary directory left behind (--keep-world)
    world_divergence: object | None = None  # a stepworld.WorldDivergence
    world_checked: bool = True  # False under --no-world-check
    world_reused: bool = False  # the world was a cached one brought back to a fresh checkout

    @property
    def bit_exact(self) -> bool:
        return (self.mismatch is None and self.divergence is None and self.world_divergence is None
                and self.served == self.total and self.draws[0] == self.draws[1]
                and self.effects[0] == self.effects[1])

    @property
    def code(self) -> int:
        if self.another_agent:
            return EXIT_USAGE
        return EXIT_NEGATIVE if self.mismatch or self.divergence or self.world_divergence else self.exit

    def problem(self) -> str | None:
        """The one line to print when the replay did not go through."""
        if self.another_agent:
            return self.another_agent
        if self.mismatch:
            return f"replay mismatch: {self.mismatch.line}"
        if self.divergence:
            return f"replay diverged: {self.divergence}"
        if self.world_divergence:
            return f"replay divergence: {self.world_divergence.line}"
        return None

    def summary(self) -> str:
        held = "bit-exact" if self.bit_exact else "not bit-exact"
        return (f"replayed {self.served} of {self.total} exchanges, {_count(self.draws)} draws, "
                f"{_count(self.effects)} effects{'' if self.world_checked else ' (world not checked)'}: {held}; "
                f"the agent exited {self.exit}" + (f"; its world is kept in {self.world}" if self.kept else ""))

    def to_json(self) -> dict:
        return {"bit_exact": self.bit_exact, "rev": self.rev, "world": self.world, "exit": self.exit,
                "exchanges": {"served": self.served, "of": self.total},
                "draws": {"consumed": self.draws[0], "of": self.draws[1]},
                "effects": {"replayed": self.effects[0], "of": self.effects[1]},
                "mismatch": self.mismatch.to_json() if self.mismatch else None,
                "divergence": self.divergence, "world_checked": self.world_checked,
                "world_reused": self.world_reused,
                "world_divergence": self.world_divergence.to_json() if self.world_divergence else None}


def _count(pair: tuple[int | None, int]) -> str:
    return f"{'unknown' if pair[0] is None else pair[0]} of {pair[1]}"


def fresh_world(repo, image: str, into: Path | None) -> Path:
    """Check the world of ``image`` out into ``into`` (absent or empty) or a new temporary directory."""
    from ..ops.checkout import checkout

    if into is None:
        into = Path(tempfile.mkdtemp(prefix="pf-world-"))
    elif Path(into).exists() and (not Path(into).is_dir() or any(os.scandir(into))):
        raise UsageError(f"'{into}' must be an empty or absent directory", param="fs_root")
    checkout(repo, image, Path(into), layers=("world",), force=True)
    return Path(into).resolve()


MAX_BLOB = 64 << 20  # a file an answered tool call wrote, larger than this, is left to the world check


def ledger_blobs(git, ledger: list[dict]) -> dict[str, str]:
    """The files the ledger's calls wrote (their ``world`` changes), blob id -> base64, for the replay
    file: a call answered from the ledger makes its change again from them. A blob the repository
    does not hold (a file rewritten before the next step captured it) is left out, and the world
    check sees what that leaves different."""
    import base64

    out: dict[str, str] = {}
    for entry in ledger:
        change = entry.get("world")
        for c in change if isinstance(change, list) else ():
            oid = c.get("blob") if isinstance(c, dict) else None
            if not isinstance(oid, str) or oid in out or len(oid) != 40:
                continue
            try:
                obj = git.get(oid)
            except ValueError:
                obj = None
            if obj is not None and obj.type_str == "blob" and obj.size <= MAX_BLOB:
                out[oid] = base64.b64encode(obj.data).decode()
    return out


def recorded_place(git, first: str) -> tuple[str | None, str | None]:
    from .stepworld import recorded_place as place

    return place(git, first)


def isolation(git, first: str, start: str, isolate: bool = True, at: Path | None = None) -> tuple:
    """Where the child of a run whose step 0 is ``first`` must see its world, starting from
    ``start``'s, checked out at ``at`` (None: somewhere not known yet, checked at a new temporary
    directory, removed again, whose name no link can know): (recorded sandbox
    path, cwd, the world's git links); refused here (PfError, exit 2), before anything is written,
    when that needs a mount namespace and none can be made, or a git link of ``start``'s world
    names something odd (``child.git_dirs``, resolved from the image). ``(None, None, ())`` when
    not isolating."""
    from . import child, gitlinks

    if not isolate:
        return None, None, ()
    root, cwd = recorded_place(git, first)
    links = gitlinks.links(git, start)
    child.check_isolation(root, links=links)
    if at is None:
        with tempfile.TemporaryDirectory(prefix="pf-world-") as tmp:
            child.git_dirs(Path(tmp).resolve(), root, links, image=(git, start))
    else:
        child.git_dirs(Path(at).resolve(), root, links, image=(git, start))
    return root, cwd, links


def new_world_dir(check) -> tuple[Path, tuple]:
    """A new temporary directory for a world and ``check(directory)`` (``isolation``'s place), the
    directory made first so that the world's git links are checked where it goes; removed again
    when the check refuses."""
    temp = Path(tempfile.mkdtemp(prefix="pf-world-"))
    try:
        return temp, check(temp)
    except BaseException:
        os.rmdir(temp)
        raise


@contextmanager
def cached_world(worlds, image: str, check):
    """``(world, place, reused)`` for the block: ``image``'s world taken from the cache ``worlds``
    (brought back to a fresh checkout, or checked out) where ``check`` (``isolation``'s) is asked
    first (``reused``: a cached world brought back, not checked out); given back to the cache
    when the block ends, removed when it raises. The child must
    run in a process group of its own, killed when it exits: nothing it left running may write
    to the world once it is cached."""
    held, place = worlds.take(image, check)
    try:
        world = held.enter(image)
        yield world, place, held.moved > 0
    except BaseException:
        worlds.drop(held)
        raise
    worlds.keep(held)


def isolated_cmd(cmd: list[str], world: Path, place: tuple, env: dict, scratch: Path) -> list[str]:
    """CMD wrapped to see ``world`` at the recorded path, the git directories its links name
    private (``child.isolated``, ``place`` from ``isolation``; ``scratch``: an empty directory
    that lasts as long as the child); when the world is shown at the recorded path,
    ``GIT_PF_WORLD`` in ``env`` names that path, as it did when the run was recorded."""
    from . import child

    wrapped = child.isolated(cmd, world, *place, scratch=scratch)
    if wrapped != list(cmd) and "GIT_PF_WORLD" in env and child.shown_at(world, place[0]):
        env["GIT_PF_WORLD"] = place[0]
    return wrapped


def plan_of(repo, rev: str):
    from .steps import run_plan

    plan = run_plan(repo.git, rev)
    if not plan.entries:
        raise UsageError(f"'{rev}' is not a recorded run: its tape holds no exchanges")
    return plan


def another_agent(replayer: Replayer, first: dict, rev: str, diverged: dict | None) -> str | None:
    """The tape is not this agent's: its first request goes to another API or path, or it draws
    otherwise than the recording before it sends anything."""
    if replayer.served:
        return None
    if diverged is not None and replayer.mismatch is None and diverged.get("what") == "draw" \
            and int(diverged.get("index") or 0) < len(first.get("draws") or ()):
        return (f"the tape of '{rev}' was recorded from another agent: before its first request, "
                f"{diverged.get('detail') or 'it drew otherwise'}")
    m = replayer.mismatch
    if m is None or not any(d["path"] in ("method", "path") for d in m.diff):
        return None
    live = {d["path"]: d["live"] for d in m.diff}
    return (f"the tape of '{rev}' was recorded from another agent: step 1 is {first['request']['method']} "
            f"{first['request']['path']}, this agent sent {live.get('method', first['request']['method'])} "
            f"{live.get('path', first['request']['path'])}")


def replay(repo, rev: str, cmd: list[str], *, realtime: bool = False, ignore: tuple = (),
           allow_effects: bool = False, fs_root: Path | None = None, world: Path | None = None,
           keep_world: bool = False, world_check: bool = True, isolate: bool = True, worlds=None) -> ReplayReport:
    """Replay the run REV ends to ``cmd``. The world is checked out into ``fs_root`` (or a temporary
    directory, removed when the replay ends, whatever its outcome, unless ``keep_world``) unless
    ``world`` is given: a directory that already holds step 0's world (a mount). ``world_check``:
    the world must be each step's as recorded (``--no-world-check`` turns it off). ``isolate``: the
    child sees the world at the path the run was recorded in, and the git directories the world
    links to as private overlays (``child.isolated``). ``worlds``: a cache of worlds
    (``executors.worlds.WorldCache``) the temporary world is taken from and given back to."""
    from . import child

    plan = plan_of(repo, rev)
    child.start_check(cmd, os.environ)
    # refused here, before anything is checked out, when it cannot be had
    check = lambda at: isolation(repo.git, plan.first, plan.first, isolate, at)
    if world is not None or fs_root is not None:
        place = check(world if world is not None else fs_root)
        world = Path(world).resolve() if world is not None else fresh_world(repo, plan.first, fs_root)
        return _replay(repo, plan, rev, cmd, world, realtime, ignore, allow_effects, world_check, place)
    if worlds is not None and not keep_world:
        with cached_world(worlds, plan.first, check) as (world, place, reused):
            report = _replay(repo, plan, rev, cmd, world, realtime, ignore, allow_effects, world_check, place,
                             group=True)
        report.world, report.world_reused = None, reused
        return report
    temp, place = new_world_dir(check)
    try:
        report = _replay(repo, plan, rev, cmd, fresh_world(repo, plan.first, temp), realtime, ignore,
                         allow_effects, world_check, place)
    finally:
        if not keep_world:
            remove_world(repo, temp, temp)
    if keep_world:
        report.kept = True
    else:
        report.world = None
    return report


def remove_world(repo, temp: Path, world: Path) -> None:
    """Remove a temporary directory holding the world ``world`` and the stat cache file its
    step captures left (the cache of a directory that is gone would only be dead weight)."""
    from ..layers.world.statcache import StatCache
    from ..ops.snapshot import resolve_fs_root

    try:
        root = resolve_fs_root(world, repo.git_dir)
    except PfError:  # the world was never made: there is no cache of it either
        root = None
    remove_tree(temp)
    if root is not None:
        StatCache.forget(repo.git_dir, root)


def remove_tree(path: Path) -> None:
    """Remove a temporary world, also where the agent left directories without write permission."""
    def writable_again(func, name, exc):
        os.chmod(os.path.dirname(name), 0o700)
        if os.path.isdir(name) and not os.path.islink(name):
            os.chmod(name, 0o700)
        func(name)

    try:
        if sys.version_info >= (3, 12):
            shutil.rmtree(path, onexc=writable_again)
        else:
            shutil.rmtree(path, onerror=lambda func, name, info: writable_again(func, name, info[1]))
    except OSError:
        shutil.rmtree(path, ignore_errors=True)


def _replay(repo, plan, rev: str, cmd: list[str], world: Path, realtime: bool, ignore: tuple,
            allow_effects: bool, world_check: bool, place: tuple, group: bool = False) -> ReplayReport:
    from .stepworld import WorldCheck, world_tree

    stop = threading.Event()
    checker = WorldCheck(repo, world, plan.tip) if world_check else None
    replayer = Replayer(plan.entries, ignore, realtime, stop, checker)
    try:
        code, watcher = _drive(plan, cmd, world, replayer, stop, allow_effects, ledger_blobs(repo.git, plan.ledger),
                               place, group)
        if checker is not None and plan.end is not None and replayer.world is None and replayer.mismatch is None \
                and watcher.diverged is None and replayer.served == replayer.total:
            last = plan.end.get("step", 0)
            replayer.world = checker.check(last, world_tree(repo.git, plan.tip), f"after step {last} (the end)")
    finally:
        if checker is not None:
            checker.close()
    consumed = watcher.consumed
    divergence = None
    if watcher.diverged is not None:
        d = watcher.diverged
        detail = str(d.get("detail") or f"{d.get('what')} {int(d.get('index') or 0) + 1} differs")
        divergence = f"{detail} ({draw_step(plan.entries, int(d.get('index') or 0))})" \
            if d.get("what") == "draw" else detail
    elif code == DIVERGED_EXIT and replayer.mismatch is None:
        divergence = "the agent's hook stopped it (exit 86) without saying why"
    first = min(plan.entries, key=lambda e: e["arrival"])

    killed = stop.is_set() or code > 128  # stopped, or ended by a signal: its hook could not say

    def counted(key: str) -> int | None:  # no word from a killed child's hook: unknown (none ran: 0)
        return int(consumed.get(key) or 0) if consumed is not None else None if killed else 0
    effects = counted("effects")
    effects = effects + watcher.replayed if effects is not None else None
    return ReplayReport(rev, str(world), code, replayer.served, replayer.total,
                        (counted("draws"), len(plan.draws)), (effects, len(plan.ledger)),
                        replayer.mismatch, divergence, another_agent(replayer, first, rev, watcher.diverged),
                        world_divergence=replayer.world, world_checked=checker is not None and checker.active)


def _drive(plan, cmd: list[str], world: Path, replayer: Replayer, stop: threading.Event,
           allow_effects: bool, blobs: dict[str, str], place: tuple, group: bool = False) -> tuple[int, Watcher]:
    """Run the child against ``replayer`` (seeing the world at the recorded ``place``, ``isolation``'s);
    its exit code and the channel's watcher. ``group``: the child in a process group of its own,
    killed when it exits."""
    from . import inject
    from .channel import write_replay_file
    from .proxy import Proxy
    from .record import drive, world_env

    with tempfile.TemporaryDirectory(prefix="pf-replay-") as tmp:
        channel, replay_file = Path(tmp) / "channel.jsonl", Path(tmp) / "replay.json"
        channel.touch()
        write_replay_file(replay_file, draws=plan.draws, effects=plan.ledger, allow_effects=allow_effects,
                          mode="replay", blobs=blobs)
        watcher = Watcher(channel, stop)
        with Proxy(replayer) as proxy:
            env = inject.child_env(world_env(dict(os.environ), proxy, world), mode="replay", channel=channel,
                                   replay_file=replay_file)
            code = drive(isolated_cmd(cmd, world, place, env, Path(tmp)), env, None, stop, watcher.tick, group=group)
        watcher.tick()
    return code, watcher
