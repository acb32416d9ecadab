"""``git pf fanout`` (docs/scale.md): N forks of an image, each running a command in its own world,
each world afterwards the fork's next image; on this machine or as tasks on a Ray cluster.

The forks are ``git pf fork``'s (branches ``<prefix>-<k>``, each a child of REV).
A fork's task gets its world in a temporary directory (forks run one after
another on a thread or in a chunk reuse one, ``executors.worlds``), runs CMD there
(cwd the world, ``GIT_PF_FORK=<k>``, ``GIT_PF_WORLD``, stdin closed, output
kept apart; past ``timeout_s``, and when CMD exits, its whole process group is
killed) and snapshots
the world as the branch's next image with the trailers ``Pf-Fanout-Exit``
(the exit code, or ``timeout``), ``Pf-Fanout-Duration-Ms`` and, when CMD
printed a ``pf-score: <number>`` line on stdout (the last one counts),
``Pf-Fanout-Score``. On a cluster the forks go in chunks, one task each. The
driver pushes one fork branch (it brings REV's image to the remote) and each
task carries its forks' commits; a worker writes them into the node's cache
repository (each checked against its id), runs the forks there and pushes the
new images in one push, never forced (each a new branch, or a fast-forward of
the one pushed). A branch the remote has already at another image of the fork
is a fork that ran: it is read back, not run again (a retried task). The
driver then fetches the images, moves the branches (fast-forward only) and
``summary`` sorts the rows by score.

From a step of a recorded run (``at_step``), a fork is ``git pf fork --at-step``'s,
made where it runs, with its reply changed as blame's ``--perturb`` changes it
(seeded by the seed, the step and k), and CMD is the agent, run on from step 0's
world as ``git pf run`` runs it (its output, stdout and stderr, is where a
``pf-score`` line is looked for); its final world is snapshotted on top of the
run's last step with the same trailers. On a cluster the driver pushes REV's
branch, and each worker pushes its fork as a new branch, never forced.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pygit2

from .. import executors
from ..ops import fork as fork_mod, maintenance
from ..image import manifest as img, refs
from ..core.errors import DataError, PfError, UsageError
from ..executors import node
from ..executors.worlds import ReusedWorld
from ..ops.snapshot import SnapshotRequest, take
from ..store.packfile import COMMIT, RunPackWriter, packed, packing
from ..transport import gitcmd, remotes

T_FORK, T_EXIT, T_TIME, T_SCORE = "Pf-Fanout-Fork", "Pf-Fanout-Exit", "Pf-Fanout-Duration-Ms", "Pf-Fanout-Score"
CHUNK = 64  # the most forks one cluster task runs (and pushes at once)
_SCORE = re.compile(rb"^pf-score:[ \t]*(\S+)[ \t]*\r?$", re.M)


@dataclass(frozen=True)
class StepFork:
    """What a fork of a recorded run at a step adds to its task."""

    step: int
    perturb: str = "text"
    seed: int = 0
    upstreams: tuple[str, ...] = ()
    source_ref: str | None = None  # the run's ref on the remote (a cluster's workers fetch it)


@dataclass(frozen=True)
class ForkTask:
    remote: node.RemoteSpec | None  # None on the local executor
    name: str  # the fork's branch, ``<prefix>-<k>``
    prefix: str
    base: str  # the fork's image: the branch's tip before CMD runs
    k: int
    cmd: tuple[str, ...]
    timeout_s: float | None = None
    at: StepFork | None = None  # a fork of a recorded run at a step; ``base`` is then the run's tip
    source: str | None = None  # on a cluster: REV's image, the fork's parent
    via: str | None = None  # on a cluster: the fork branch the driver pushed, which brings REV's image
    commit: bytes | None = None  # on a cluster: the fork's commit itself, which the worker writes (checked by its id)


def score_of(stdout: bytes) -> float | None:
    """The number of the last ``pf-score: <number>`` line, or None (none, or not a finite number)."""
    for raw in reversed(_SCORE.findall(stdout)):
        try:
            value = float(raw.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            continue
        if math.isfinite(value):
            return value
    return None


def _run_cmd(cmd: tuple[str, ...], world: Path, k: int, timeout_s: float | None, out_path: Path) -> str:
    """Run CMD in ``world``; its exit code as text, or ``timeout``. When CMD exits (or times out),
    what it left running in its process group is killed: the world is the next fork's."""
    env = dict(os.environ, GIT_PF_FORK=str(k), GIT_PF_WORLD=str(world))
    with open(out_path, "wb") as out:
        try:
            proc = subprocess.Popen(list(cmd), cwd=world, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return "127"  # as a shell says of a command it cannot start
        exited = _exited(proc.pid, timeout_s)  # not reaped yet: its group's id stays its own until then
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait()
        return str(code) if exited else "timeout"


def _exited(pid: int, timeout_s: float | None) -> bool:
    """Wait until the child ``pid`` exits, at most ``timeout_s``, leaving it to be reaped; False on timeout."""
    if timeout_s is None:
        os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT)
        return True
    end, delay = time.monotonic() + timeout_s, 0.0005
    while os.waitid(os.P_PID, pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
        left = end - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.05)
    return True


def row_of(git, name: str, commit: str) -> dict:
    """A fork's summary row read from its image (its Pf-Fanout-* trailers)."""
    c = git.get(commit)
    if not isinstance(c, pygit2.Commit):
        raise DataError(f"fork {name}: {commit[:12]} is not a commit")
    t = dict(img.parse_trailers(c.message))
    if T_EXIT not in t:
        raise DataError(f"fork {name}: its branch moved to {commit[:12]}, which no fan-out wrote")
    exit_ = t[T_EXIT]
    try:
        ms = int(t.get(T_TIME, "0"))
        score = float(t[T_SCORE]) if T_SCORE in t else None
        k = int(t.get(T_FORK, "0"))
    except ValueError:
        raise DataError(f"fork {name}: the image {commit[:12]} has unreadable fan-out trailers") from None
    return {"fork": k, "name": name, "image": commit, "exit": int(exit_) if exit_.lstrip("-").isdigit() else None,
            "timed_out": exit_ == "timeout", "duration_s": ms / 1000, "score": score}


def run_fork(repo, task: ForkTask, ref: str, worlds: ReusedWorld | None = None) -> dict:
    """Run CMD in the world of ``task.base`` and write the world as its child on ``ref``; the row, with
    ``task_s``: the seconds of the whole fork (world, CMD, snapshot). ``worlds``: the directory the
    forks run one after another on this thread reuse (``executors.worlds``); without it, one of its own."""
    began = time.monotonic()
    own = worlds is None
    worlds = ReusedWorld(repo) if own else worlds
    try:
        world = worlds.enter(task.base)
        start = time.monotonic()
        exit_ = _run_cmd(task.cmd, world, task.k, task.timeout_s, worlds.tmp / "stdout")
        cmd_end = time.monotonic()
        ms = int((cmd_end - start) * 1000)
        score = score_of((worlds.tmp / "stdout").read_bytes())
        trailers = [(T_FORK, str(task.k)), (T_EXIT, exit_), (T_TIME, str(ms))]
        if score is not None:
            trailers.append((T_SCORE, repr(score)))
        result = take(repo, SnapshotRequest(fs_root=world, ref=ref, parent=task.base, allow_empty=True,
                                            message=f"fanout {task.name}: exit {exit_}", trailers=tuple(trailers)))
    finally:
        if own:
            worlds.close()
    end = time.monotonic()
    phases = {"world": start - began, "run": cmd_end - start, "snapshot": end - cmd_end}
    return dict(row_of(repo.git, task.name, result.image.id), task_s=round(end - began, 6),
                phases_s={k: round(v, 6) for k, v in phases.items()})


def run_step_fork(repo, task: ForkTask, target: str, worlds: ReusedWorld | None = None) -> dict:
    """Fork the run ``task.base`` at ``task.at.step`` with a changed reply onto ``target`` (a branch
    name, or a full ref), run the agent on, and snapshot its final world there; the row. ``worlds``:
    the directory the forks run one after another on this thread reuse (the agent's process group
    killed when it exits); without it, one of its own."""
    from ..blame import perturb, trials
    from ..runs import forking, runon
    from ..runs.forward import Upstreams
    from ..runs.steps import at_step

    at, git = task.at, repo.git
    began = time.monotonic()
    full = target if target.startswith(refs.ROOT) else refs.HEADS + target
    change = trials.reply_change(at.perturb, perturb.load(at.perturb), at.seed, at.step, task.k,
                                 Upstreams.from_repo(git, list(at.upstreams)))
    where = {"ref": target} if target.startswith(refs.ROOT) else {"name": target}
    fork = forking.fork_at_step(repo, task.base, at.step, entry_change=change, **where)
    own = worlds is None
    worlds = ReusedWorld(repo) if own else worlds
    stop = threading.Event()
    timer = threading.Timer(task.timeout_s, stop.set) if task.timeout_s else None
    try:
        world = worlds.enter(at_step(git, fork.id, 0))
        start = time.monotonic()
        with open(worlds.tmp / "stdout", "wb") as out:
            if timer is not None:
                timer.start()
            result, _ = runon.run(repo, target, list(task.cmd), upstreams=list(at.upstreams), world=world,
                                  stop=stop, output=out, group=True)
        ms = int((time.monotonic() - start) * 1000)
        exit_ = "timeout" if stop.is_set() else str(result.exit)
        score = score_of((worlds.tmp / "stdout").read_bytes())
        trailers = [(T_FORK, str(task.k)), (T_EXIT, exit_), (T_TIME, str(ms))]
        if score is not None:
            trailers.append((T_SCORE, repr(score)))
        snap = take(repo, SnapshotRequest(fs_root=world, ref=full, parent=refs.ref_tip(git, full), allow_empty=True,
                                          message=f"fanout {task.name}: exit {exit_}", trailers=tuple(trailers)))
    finally:
        if timer is not None:
            timer.cancel()
        if own:
            worlds.close()
    return dict(row_of(git, task.name, snap.image.id), task_s=round(time.monotonic() - began, 6))


def _bring(repo, tasks: tuple[ForkTask, ...]) -> None:
    """What a chunk's forks need, into the node's cache. Forks of a recorded run: the run, and every
    fork branch of the fan-out (one that ran already is not run again). Forks of an image: REV's
    image, fetched once per node by the one fork branch the driver pushed, and each fork's commit,
    which its task carries and which is written here only when it hashes to the fork's id."""
    git = repo.git
    if any(t.at is not None for t in tasks):
        runs = sorted({t.at.source_ref for t in tasks if t.at is not None})
        prefix = tasks[0].prefix
        node.fetch(repo, [*(f"+{r}:{node.TRACKING}{r[len(refs.ROOT):]}" for r in runs),
                          f"+{refs.HEADS}{prefix}-*:{node.TRACKING}heads/{prefix}-*"])
    missing = [t for t in tasks if t.base not in git]
    if any(t.source not in git for t in missing if t.source and t.via):
        via = next(t.via for t in missing if t.via)
        node.fetch(repo, [f"+{refs.HEADS}{via}:{node.TRACKING}heads/{via}"])
    if any(t.commit for t in missing if t.source in git):
        with packed(git) as pack:
            for t in missing:
                if t.commit and t.source in git and pack.add(COMMIT, t.commit).hex() != t.base:
                    raise DataError(f"fork {t.name}: the commit its task carries is not {t.base[:12]}")
    for t in tasks:
        if t.base not in git:
            raise DataError(f"fork {t.name}: the remote lacks its image {t.base[:12]}")


def fork_tasks(tasks: tuple[ForkTask, ...]) -> list[dict]:
    """A chunk of a fan-out's forks on a cluster worker, one Ray task: bring what they need into the
    node's cache (``_bring``), run each fork not known to have run, then push every result in one
    ``git push`` (each ref never forced); the rows come back only once their refs are on the remote.
    A fork is written on a work ref of the cache (``refs/pf/work/fanout/<name>``); the remote-tracking
    refs move only by fetches, so a retried chunk reads the remote's state, never what a dead attempt
    left here (a fork it pushed is refused to the retry and read back, ``ran: false``)."""
    began = time.monotonic()
    spec = tasks[0].remote
    repo = node.cache(spec)
    git = repo.git
    packs = RunPackWriter(git)  # the chunk's packs (one per snapshot) merged as they come, and at its end
    with packing(git, packs):
        _bring(repo, tasks)
    fetched = time.monotonic()
    rows: list = [None] * len(tasks)
    todo = []
    for i, t in enumerate(tasks):
        tip = node.tracked(repo, f"heads/{t.name}")
        if tip is not None and (t.at is not None or tip != t.base):  # it ran already (a retried task);
            rows[i] = dict(row_of(git, t.name, tip), ran=False)  # a run not seen here yet is caught by the push
        else:
            todo.append(i)
    works = [f"{refs.ROOT}work/fanout/{tasks[i].name}" for i in todo]
    try:
        with packing(git, packs), ReusedWorld(repo) as worlds:  # one world directory for the chunk's forks
            for i, work in zip(todo, works):
                if git.references.get(work) is not None:
                    git.references.delete(work)  # a dead attempt's
                run_one = run_step_fork if tasks[i].at else run_fork
                rows[i] = run_one(repo, tasks[i], work, worlds)
        packs.consolidate()
        ran = time.monotonic()
        pushed = node.publish_many(repo, node.origin(repo, spec),
                                   [(rows[i]["image"], refs.HEADS + tasks[i].name, None if tasks[i].at else tasks[i].base)
                                    for i in todo])
    finally:
        for work in works:
            if git.references.get(work) is not None:
                git.references.delete(work)
    refused = [tasks[i].name for i in todo if not pushed[refs.HEADS + tasks[i].name]]
    if refused:
        node.fetch(repo, [f"+{refs.HEADS}{name}:{node.TRACKING}heads/{name}" for name in refused])
    end = time.monotonic()
    fetch_s, push_s = (fetched - began) / len(tasks), (end - ran) / max(1, len(todo))  # shared by the chunk
    for i in todo:
        t = tasks[i]
        if t.name in refused:
            theirs = node.tracked(repo, f"heads/{t.name}")
            if t.at is None and t.base not in [str(p) for p in git.get(theirs).parent_ids]:
                raise DataError(f"fork {t.name}: the remote has that branch at {theirs[:12]}, which is not of "
                                f"this fan-out (give another --name)")
            rows[i] = dict(row_of(git, t.name, theirs), ran=False)
            continue
        phases = {"fetch": round(fetch_s, 6), **rows[i].get("phases_s", {"fork": rows[i]["task_s"]}),
                  "push": round(push_s, 6)}
        rows[i] = dict(rows[i], ran=True, task_s=round(fetch_s + rows[i]["task_s"] + push_s, 6), phases_s=phases)
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """The rows by score, best first (no score last), then by fork."""
    return sorted(rows, key=lambda r: (r["score"] is None, -(r["score"] or 0.0), r["fork"]))


def _bring_back(repo, remote, rows: list[dict], source: str) -> None:
    """The forks' images from the remote, in one fetch of their branches (objects only; the fetch
    tells the remote of ``source``, which every fork grew from, and of nothing else of this
    repository), then every branch and its remote-tracking ref moved here to its row's image in one
    transaction: each a fast-forward (or a new branch: a fork of a recorded run) from where it was
    read, else one line and nothing moves."""
    git = repo.git
    gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--refmap=", "--quiet", "--no-write-fetch-head", "--no-auto-gc",
                              f"--negotiation-tip={source}", remote.arg, *(refs.HEADS + r["name"] for r in rows)],
               cwd=git.workdir or repo.git_dir)
    moves = []
    for r in rows:
        old, new = refs.branch_tip(git, r["name"]), r["image"]
        if new not in git or (old is not None and old != new and not git.descendant_of(new, old)):
            raise DataError(f"fork {r['name']}: the remote's image {new[:12]} is not a fast-forward of this "
                            f"repository's branch")
        if old != new:  # each from where it was read (none: created), all at once or none
            moves.append(f"update {refs.HEADS}{r['name']} {new} {old or '0' * len(new)}\n")
        moves.append(f"update {remote.tracking('heads/' + r['name'])} {new}\n")
    proc = gitcmd.run(repo.git_dir, ["update-ref", "-m", "pf fanout", "--stdin"], input="".join(moves).encode(),
                      check=False)
    if proc.returncode != 0:
        raise PfError(f"the fork branches moved while this command ran; none was changed "
                      f"({gitcmd.last_line(proc.stderr)})")
    maintenance.auto_gc(git)  # the fetch's pack counts as a snapshot's does (git's own gc in the foreground is not run)


def _on_remote(repo, remote, rev: str, source: str) -> str | None:
    """A branch the remote has whose tip is REV's image ``source`` or reaches it, so that the workers
    fetch REV by it and nothing is pushed first: among the branches whose remote-tracking ref is at
    ``source`` (and REV's own branch, at ``source`` or past it), one the remote still has where this
    repository last saw it (one ``ls-remote``). None: push."""
    git = repo.git
    seen = refs.list_refs(git, remote.tracking("heads/"))
    base = re.split(r"[~^]", rev, maxsplit=1)[0]
    mine = seen.get(base)
    candidates = [b for b, tip in seen.items() if tip == source]
    if mine is not None and base not in candidates and mine in git and git.descendant_of(mine, source):
        candidates.insert(0, base)
    if not candidates:
        return None
    theirs = gitcmd.ls_remote(repo.git_dir, remote.arg, [refs.HEADS + b for b in candidates[:8]],
                              cwd=git.workdir or repo.git_dir)
    return next((b for b in candidates[:8] if theirs.get(refs.HEADS + b) == seen[b]), None)


def _step_forks(repo, rev: str, n: int, prefix: str | None, step: int, perturb_spec: str) -> tuple[str, list]:
    """(the run's tip, [(k, branch name)]) of a fan-out of the recorded run REV at ``step``."""
    from ..blame import perturb
    from ..runs.replaying import plan_of

    tip = refs.resolve(repo.git, rev)
    last = max((e["step"] for e in plan_of(repo, tip).entries), default=0)
    if not 1 <= step <= last:
        raise UsageError(f"--at-step {step}: the run has steps 1..{last}")
    perturb.load(perturb_spec)  # a plug-in that does not load: one line before anything runs
    names = fork_mod.planned_names(repo, rev, n, prefix)
    return tip, [(int(name.rsplit("-", 1)[1]), name) for name in names]


def fanout(repo, rev: str, n: int, cmd: list[str], *, prefix: str | None = None, executor: str = "local",
           jobs: int | None = None, ray_address: str | None = None, timeout_s: float | None = None,
           at_step: int | None = None, perturb: str = "text", seed: int = 0, upstreams: list[str] = (),
           progress=None) -> dict:
    """Fork REV ``n`` times and run CMD in each fork's world; ``{"rev", "executor", "forks": rows}``.
    With ``at_step``: forks of the recorded run REV at that step, CMD the agent run on."""
    if not cmd:
        raise UsageError("give the command after '--'")
    if timeout_s is not None and not (math.isfinite(timeout_s) and timeout_s > 0):
        raise UsageError(f"--timeout must be a number of seconds above 0, not {timeout_s}")
    ex = executors.make(executor, jobs=jobs or os.cpu_count() or 1, address=ray_address)
    remote = spec = None
    if ex.remote:
        if not remotes.names(repo):
            raise UsageError("--executor ray needs a remote the workers can reach (git remote add origin URL)")
        remote = remotes.resolve(repo, None)
        spec = node.RemoteSpec.of(repo, remote)
    source = refs.resolve(repo.git, rev)
    if at_step is not None:
        source, planned = _step_forks(repo, rev, n, prefix, at_step, perturb)
        ex.start()
        at = StepFork(at_step, perturb, seed, tuple(upstreams))
        if remote is not None:
            from ..transport.push import push, refspecs_for

            at = StepFork(at_step, perturb, seed, tuple(upstreams), refspecs_for(repo, [rev], False)[0][0])
            push(repo, remote, [rev])
        prefix = planned[0][1].rsplit("-", 1)[0]
        tasks = [ForkTask(spec, name, prefix, source, k, tuple(cmd), timeout_s, at) for k, name in planned]
        made = [name for _, name in planned]
    else:
        ex.start()
        forks = fork_mod.fork(repo, rev, n, prefix)
        prefix = forks[0].name.rsplit("-", 1)[0]
        tasks = [ForkTask(spec, f.name, prefix, f.id, f.index, tuple(cmd), timeout_s) for f in forks]
        made = [f.name for f in forks]
        if remote is not None:
            from ..transport.push import push

            try:  # a branch brings REV's image to the workers; each task carries its own fork's commit
                via = _on_remote(repo, remote, rev, source)
                if via is None:  # the remote lacks REV: the first fork's branch brings it there
                    push(repo, remote, made[:1])
                    via = made[0]
                tasks = [replace(t, source=source, via=via, commit=repo.git.odb.read(t.base)[1]) for t in tasks]
            except BaseException:
                for f in forks:  # the forks were never pushed and no task ran: nothing of this fan-out stays
                    ref = repo.git.references.get(refs.HEADS + f.name)
                    if ref is not None and str(ref.target) == f.id:
                        ref.delete()
                raise
    if remote is not None:
        rows = [row for chunk in ex.map(fork_tasks, executors.chunks(tasks, ex.width(), CHUNK),
                                        on_result=None if progress is None else lambda got: [progress(r) for r in got])
                for row in chunk]
        _bring_back(repo, remote, rows, source)
    else:
        local, worlds = threading.local(), []

        def one(task: ForkTask) -> dict:
            if not hasattr(local, "repo"):  # a repository object and a world directory per thread
                local.repo = type(repo)(pygit2.Repository(str(repo.git_dir)))
                local.worlds = ReusedWorld(local.repo)
                worlds.append(local.worlds)
            if task.at is not None:
                return dict(run_step_fork(local.repo, task, task.name, local.worlds), ran=True)
            return dict(run_fork(local.repo, task, refs.HEADS + task.name, local.worlds), ran=True)

        try:
            rows = ex.map(one, tasks, on_result=progress)
        finally:
            for w in worlds:
                w.close()
    return {"rev": source, "executor": ex.name, "forks": summary(rows)}
