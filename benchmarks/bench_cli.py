"""Start-up time of the ``git pf`` command against ``python -c pass`` and git, in one run.

    python -m benchmarks.bench_cli [--runs 9] [--files 5000] [--changed 10]

Every command runs as a user types it (``git pf …`` through git's dispatcher,
output to /dev/null); each figure is the median of ``--runs`` runs, so one run
that waited for a core does not move it, with the median CPU time (user + sys)
of the same runs beside it: load on the machine inflates only the wall time.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .bench_snapshot import make_tree
from .common import git_env, report, sh, timed, verdict, workdir

GOAL_START = 0.15  # --version and -h
GOAL_SNAPSHOT = 0.25  # incremental snapshot of 5,000 files with 10 changed


def _env(repo: Path) -> dict:
    bin_dir = str(Path(sys.executable).parent)  # where the git-pf console script is installed
    return dict(git_env(), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", GIT_PF_REPO=str(repo))


class Timing(float):
    """Median wall time (the float) with the median CPU time (user + sys) of the same runs."""

    cpu: float


def _median(runs: int, args: list, cwd=None, env=None, before=None) -> Timing:
    """Median wall and CPU time of ``args``; ``before`` (untimed) runs ahead of each run."""
    walls, cpus = [], []
    for i in range(runs):
        if before is not None:
            before(i)
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        subprocess.run(args, cwd=cwd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)
    t = Timing(statistics.median(walls))
    t.cpu = statistics.median(cpus)
    return t


def _ms(t: float) -> str:
    return f"{t * 1000:.0f} ms" + (f" (CPU {t.cpu * 1000:.0f})" if isinstance(t, Timing) else "")


def bench_start(base: Path, runs: int) -> list:
    """--version, -h, show, log -n 5 on a repository of 6 images; git's equivalents on 6 commits."""
    from git_pf import Repo

    repo, _ = Repo.init(base / "pf")
    sb = base / "sb"
    sb.mkdir()
    plain = base / "plain"
    sh("git", "init", "-q", plain)
    for i in range(6):
        (sb / f"f{i}.txt").write_text(f"{i}\n")
        repo.snapshot(sb, name="main", message=f"image {i}")
        (plain / f"f{i}.txt").write_text(f"{i}\n")
        sh("git", "add", "-A", cwd=plain, env=git_env())
        sh("git", "commit", "-q", "-m", f"commit {i}", cwd=plain, env=git_env())
    env = _env(base / "pf")
    t_py = _median(runs, [sys.executable, "-c", "pass"])
    pairs = [
        ("--version", ["git", "pf", "--version"], ["git", "--version"], GOAL_START),
        ("-h", ["git", "pf", "-h"], ["git", "-h"], GOAL_START),
        ("show", ["git", "pf", "show"], ["git", "show", "--stat"], None),
        ("log -n 5", ["git", "pf", "log", "-n", "5"], ["git", "log", "-n", "5"], None),
    ]
    rows = [("python -c pass", _ms(t_py), "")]
    for name, pf_args, git_args, goal in pairs:
        t_pf = _median(runs, pf_args, cwd=base / "pf", env=env)
        t_git = _median(runs, git_args, cwd=plain, env=env)
        judged = f"goal <= {goal * 1000:.0f} ms  {verdict(t_pf <= goal)}" if goal else ""
        rows += [
            (f"git pf {name}", _ms(t_pf), judged),
            (f"  vs {' '.join(git_args)} ({_ms(t_git)})", f"{t_pf / t_git:.1f}x", ""),
            ("  vs python -c pass", f"{t_pf / t_py:.1f}x", f"+{(t_pf - t_py) * 1000:.0f} ms"),
        ]
    return rows


def bench_snapshot(base: Path, runs: int, files: int, changed: int) -> list:
    """``git pf snapshot`` of a tree with ``changed`` files changed since the last image, against
    ``git add -A && git commit`` of the same change."""
    from git_pf import Repo

    sb = base / "sb"
    paths = make_tree(sb, files, files * 1000)
    repo, _ = Repo.init(base / "pf")
    repo.snapshot(sb, name="main")
    plain = base / "plain"
    sh("git", "init", "-q", plain)
    genv = dict(git_env(), GIT_DIR=str(plain / ".git"), GIT_WORK_TREE=str(sb))
    sh("git", "add", "-A", env=genv)
    sh("git", "-c", "gc.auto=0", "commit", "-q", "-m", "x", env=genv)
    env = _env(base / "pf")

    def change(i: int) -> None:
        for p in paths[i * changed:(i + 1) * changed]:
            p.write_bytes(p.read_bytes()[::-1] + b"!")
        time.sleep(0.2)  # files written in the last 100 ms before a snapshot are re-read next time

    t_pf = _median(runs, ["git", "pf", "snapshot", "--fs-root", str(sb), "--name", "main", "-q"], env=env,
                   before=change)
    git_cmd = ["sh", "-c", "git add -A && git -c gc.auto=0 commit -q -m x"]
    t_git = _median(runs, git_cmd, env=genv, before=lambda i: change(runs + i))
    change(2 * runs)
    t_api, _ = timed(repo.snapshot, sb, name="main")
    return [
        (f"git pf snapshot, {files} files, {changed} changed", _ms(t_pf),
         f"goal <= {GOAL_SNAPSHOT * 1000:.0f} ms  {verdict(t_pf <= GOAL_SNAPSHOT)}"),
        (f"  vs git add -A && git commit ({_ms(t_git)})", f"{t_pf / t_git:.1f}x", ""),
        ("  same snapshot through Repo.snapshot (one run)", _ms(t_api), ""),
    ]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--changed", type=int, default=10)
    args = ap.parse_args(argv)
    with workdir("cli") as base:
        report("git pf start-up vs python and git", bench_start(base, args.runs))
    with workdir("cli-snap") as base:
        report("incremental snapshot through the CLI vs git", bench_snapshot(base, args.runs, args.files, args.changed))


if __name__ == "__main__":
    main()
