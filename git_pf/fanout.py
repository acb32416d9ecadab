"""``git pf fanout`` (docs/scale.md): N forks of an image, each running a command in its own world,
each world afterwards the fork's next image; on this machine or as tasks on a Ray cluster.

The forks are ``git pf fork``'s (branches ``<prefix>-<k>``, each a child of REV).
A fork's task checks its world out into a temporary directory, runs CMD there
(cwd the world, ``GIT_PF_FORK=<k>``, ``GIT_PF_WORLD``, stdin closed, output
kept apart; past ``timeout_s`` its whole process group is killed) and snapshots
the world as the branch's next image with the trailers ``Pf-Fanout-Exit``
(the exit code, or ``timeout``), ``Pf-Fanout-Duration-Ms`` and, when CMD
printed a ``pf-score: <number>`` line on stdout (the last one counts),
``Pf-Fanout-Score``. On a cluster the driver pushes the fork branches first; a
worker fetches its branch into the node's cache repository, runs the fork
there and pushes the new image as a fast-forward, never forced. A branch the
remote has already moved past its fork is a fork that ran: it is read back,
not run again (a retried task, a resumed fan-out). The driver then fetches
the branches (fast-forward only) and ``summary`` sorts the rows by score.
"""
from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from . import executors, fork as fork_mod, image as img, refs
from .errors import DataError, UsageError
from .executors import node
from .runs.replaying import fresh_world, remove_world
from .snapshot import SnapshotRequest, take
from .transport import gitcmd, remotes

T_FORK, T_EXIT, T_TIME, T_SCORE = "Pf-Fanout-Fork", "Pf-Fanout-Exit", "Pf-Fanout-Duration-Ms", "Pf-Fanout-Score"
_SCORE = re.compile(rb"^pf-score:[ \t]*(\S+)[ \t]*\r?$", re.M)


@dataclass(frozen=True)
class ForkTask:
    remote: node.RemoteSpec | None  # None on the local executor
    name: str  # the fork's branch, ``<prefix>-<k>``
    prefix: str
    base: str  # the fork's image: the branch's tip before CMD runs
    k: int
    cmd: tuple[str, ...]
    timeout_s: float | None = None


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
    """Run CMD in ``world``; its exit code as text, or ``timeout``."""
    env = dict(os.environ, GIT_PF_FORK=str(k), GIT_PF_WORLD=str(world))
    with open(out_path, "wb") as out:
        try:
            proc = subprocess.Popen(list(cmd), cwd=world, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:
            return "127"  # as a shell says of a command it cannot start
        try:
            return str(proc.wait(timeout_s))
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()
            return "timeout"


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


def run_fork(repo, task: ForkTask, ref: str) -> dict:
    """Run CMD in the world of ``task.base`` and write the world as its child on ``ref``; the row, with
    ``task_s``: the seconds of the whole fork (world, CMD, snapshot)."""
    began = time.monotonic()
    tmp = Path(tempfile.mkdtemp(prefix="pf-fanout-"))
    world = tmp / "world"
    try:
        fresh_world(repo, task.base, world)
        start = time.monotonic()
        exit_ = _run_cmd(task.cmd, world, task.k, task.timeout_s, tmp / "stdout")
        ms = int((time.monotonic() - start) * 1000)
        score = score_of((tmp / "stdout").read_bytes())
        trailers = [(T_FORK, str(task.k)), (T_EXIT, exit_), (T_TIME, str(ms))]
        if score is not None:
            trailers.append((T_SCORE, repr(score)))
        result = take(repo, SnapshotRequest(fs_root=world, ref=ref, parent=task.base, allow_empty=True,
                                            message=f"fanout {task.name}: exit {exit_}", trailers=tuple(trailers)))
    finally:
        remove_world(repo, tmp, world)
    return dict(row_of(repo.git, task.name, result.image.id), task_s=round(time.monotonic() - began, 6))


def fork_task(task: ForkTask) -> dict:
    """A fork on a cluster worker: fetch its branch into the node's cache, run it unless it ran, push."""
    began = time.monotonic()
    spec = task.remote
    repo = node.cache(spec)
    here = f"{node.TRACKING}heads/{task.name}"
    if task.base not in repo.git:  # the first fork of this fan-out on this node brings every fork's commit
        node.fetch(repo, [f"+{refs.HEADS}{task.prefix}-*:{node.TRACKING}heads/{task.prefix}-*"])
        if task.base not in repo.git:
            raise DataError(f"fork {task.name}: the remote lacks its image {task.base[:12]}")
    fetched = time.monotonic()
    tip = node.tracked(repo, f"heads/{task.name}")
    if tip is not None and tip != task.base:  # it ran already (a retried task); a run not seen here yet
        return dict(row_of(repo.git, task.name, tip), ran=False)  # is caught by the push below
    row = run_fork(repo, task, here)
    ran = time.monotonic()
    if not node.publish(repo, node.origin(repo, spec), row["image"], refs.HEADS + task.name, known=task.base):
        node.fetch(repo, [f"+{refs.HEADS}{task.name}:{here}"])
        return dict(row_of(repo.git, task.name, node.tracked(repo, f"heads/{task.name}")), ran=False)
    end = time.monotonic()
    return dict(row, ran=True, task_s=round(end - began, 6),  # with the fetch and the push
                phases_s={"fetch": round(fetched - began, 6), "fork": row["task_s"], "push": round(end - ran, 6)})


def summary(rows: list[dict]) -> list[dict]:
    """The rows by score, best first (no score last), then by fork."""
    return sorted(rows, key=lambda r: (r["score"] is None, -(r["score"] or 0.0), r["fork"]))


def fanout(repo, rev: str, n: int, cmd: list[str], *, prefix: str | None = None, executor: str = "local",
           jobs: int | None = None, ray_address: str | None = None, timeout_s: float | None = None,
           progress=None) -> dict:
    """Fork REV ``n`` times and run CMD in each fork's world; ``{"rev", "executor", "forks": rows}``."""
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
    ex.start()
    forks = fork_mod.fork(repo, rev, n, prefix)
    prefix = forks[0].name.rsplit("-", 1)[0]
    tasks = [ForkTask(spec, f.name, prefix, f.id, f.index, tuple(cmd), timeout_s) for f in forks]
    if remote is not None:
        from .transport.push import push

        try:
            push(repo, remote, [f.name for f in forks])
        except BaseException:
            for f in forks:  # the forks were never pushed and no task ran: nothing of this fan-out stays
                ref = repo.git.references.get(refs.HEADS + f.name)
                if ref is not None and str(ref.target) == f.id:
                    ref.delete()
            raise
        rows = ex.map(fork_task, tasks, on_result=progress)
        specs = [s for f in forks for s in (f"{refs.HEADS}{f.name}:{refs.HEADS}{f.name}",
                                            f"+{refs.HEADS}{f.name}:{remote.tracking('heads/' + f.name)}")]
        gitcmd.run(repo.git_dir, ["fetch", "--no-tags", "--refmap=", "--quiet", remote.arg, *specs],
                   cwd=repo.git.workdir or repo.git_dir)
    else:
        local = threading.local()

        def one(task: ForkTask) -> dict:
            if not hasattr(local, "repo"):  # a repository object per thread
                local.repo = type(repo)(pygit2.Repository(str(repo.git_dir)))
            return dict(run_fork(local.repo, task, refs.HEADS + task.name), ran=True)

        rows = ex.map(one, tasks, on_result=progress)
    return {"rev": source, "executor": ex.name, "forks": summary(rows)}
