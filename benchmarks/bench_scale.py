"""Fan-outs and blame trials on a one-node Ray cluster against the local executor, in the same run.

    python -m benchmarks.bench_scale [--forks 50,200,1000] [--files 1,400] [--repeat R] [-k 3] [--no-blame] [--no-fanout]

A Ray head (2 CPUs, a HOME and cwd of its own) and a bare remote behind ``git daemon``
on 127.0.0.1 are started for the run. For each image size (``--files`` files of 2 KiB
in the world) a repository is made and pushed; a warm-up fan-out of 8 forks fills the
node's cache repository and Ray's worker pool. Then, for each fork count, a fan-out
whose command does nothing (``true``) runs on the local executor (2 threads) and on
Ray, interleaved, ``--repeat`` times (then the median ratio too; the load average
at each run is printed, as the machine may be shared). Printed: tasks per second of each, the ratio, and the per-task
overhead (the whole task less its command: on Ray the fetch of the fork's branch,
the world (checked out for the first fork of a chunk or thread, moved back for the
others), the snapshot and the push) at p50 and p99, and each phase's
p50 (on Ray a chunk's fetch and push are shared by its forks). With blame, a
scripted agent's run (``git pf blame --validate``'s) is blamed at its fault step and
the one before, k trials each, with ``--jobs 2`` and on Ray (connected, and a blame of 2
trials run first to warm the node), interleaved, ``--repeat`` times: trials per minute of each.
Each fan-out starts once a background ``git gc`` an earlier one started has ended.
Everything lives in a temporary directory; the cluster is stopped by its process group.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from .common import git_env, report, sh, workdir

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the loopback servers of the tests


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _repo(base: Path, url: str, files: int):
    """A repository whose one image holds ``files`` files of 2 KiB, pushed to its own bare remote."""
    from git_pf import Repo
    from git_pf.ops.snapshot import SnapshotRequest, take
    from git_pf.transport import remotes
    from git_pf.transport.push import push
    from transport_helpers import bare

    name = f"img{files}"
    bare(base / "served" / f"{name}.git")
    world = base / f"world{files}"
    world.mkdir()
    for i in range(files):
        (world / f"f{i:04d}.txt").write_bytes(os.urandom(1024).hex().encode())
    repo, _ = Repo.init(base / f"repo{files}")
    take(repo, SnapshotRequest(fs_root=world, branch="main"))
    sh("git", "remote", "add", "origin", f"{url}/{name}.git", cwd=base / f"repo{files}")
    push(repo, remotes.resolve(repo, None), ["main"])  # the remote has REV: a fan-out pushes nothing first
    return repo


def _quiet(repo, limit: float = 120) -> None:
    """Wait while a ``git gc --auto`` that an earlier fan-out started in the background runs (the
    local executor's snapshots start one past 50 packs), so it does not weigh on the next run."""
    end = time.time() + limit
    while (repo.git_dir / "gc.pid").exists() and time.time() < end:
        time.sleep(0.1)


def _fanout(repo, n: int, executor: str, address: str, prefix: str) -> tuple[float, list[dict]]:
    from git_pf.rollouts.fanout import fanout

    _quiet(repo)
    t0 = time.perf_counter()
    out = fanout(repo, "main", n, ["true"], prefix=prefix, executor=executor, jobs=2,
                 ray_address=address if executor == "ray" else None)
    return time.perf_counter() - t0, out["forks"]


def _fanouts(base: Path, url: str, address: str, forks: list[int], files: list[int], repeat: int) -> None:
    rows = []
    for size in files:
        repo = _repo(base, url, size)
        _fanout(repo, 8, "ray", address, "warm")  # the node's cache and Ray's workers, warm
        for n in (forks if size == files[0] else [f for f in forks if f <= 200][-1:]):
            ratios = []
            for again in range(repeat):
                took = {}
                for executor in ("local", "ray"):
                    load = os.getloadavg()[0]
                    wall, got = _fanout(repo, n, executor, address, f"{executor}{n}r{again}")
                    over = [(r["task_s"] - r["duration_s"]) * 1000 for r in got]
                    took[executor] = wall
                    rows.append((f"{n} forks, {size} files, {executor}", f"{n / wall:.1f} tasks/s",
                                 f"overhead p50 {_pct(over, 0.5):.0f} ms, p99 {_pct(over, 0.99):.0f} ms "
                                 f"(load {load:.1f})"))
                    phases = [r["phases_s"] for r in got if r.get("phases_s")]
                    if phases:
                        rows.append(("  its phases, p50", "", ", ".join(
                            f"{k} {_pct([p.get(k, 0.0) * 1000 for p in phases], 0.5):.0f} ms" for k in phases[0])))
                ratios.append(took["ray"] / took["local"])
                rows.append((f"{n} forks, {size} files, ray / local wall", f"{ratios[-1]:.2f}x", "goal: at most 1.5x"))
            if repeat > 1:
                rows.append((f"{n} forks, {size} files, ray / local wall, median of {repeat}",
                             f"{statistics.median(ratios):.2f}x", "goal: at most 1.5x"))
    report("Fan-out of no-op forks: Ray (1 node, 2 CPUs) against the local executor (2 threads)", rows)


def _blame(base: Path, url: str, address: str, k: int, repeat: int) -> None:
    from git_pf import Repo
    from git_pf import executors
    from git_pf.testing import scripted
    from git_pf.blame.engine import BlameOptions, blame
    from git_pf.blame.validate import case_plan
    from git_pf.testing.fakellm import FakeLLM
    from git_pf.runs.record import record
    from transport_helpers import bare

    plan = next(p for p in (case_plan(0, c) for c in range(40)) if p.step >= 2)
    bare(base / "served" / "blame.git")
    repo, _ = Repo.init(base / "blame")
    sh("git", "remote", "add", "origin", f"{url}/blame.git", cwd=base / "blame")
    world = base / "blame-world"
    world.mkdir()
    (world / scripted.TASK).write_bytes(scripted.task_json(plan.seed))
    agent = ["python", "-m", "git_pf.testing.scripted", "agent", "--task-seed", str(plan.seed)]
    oracle = f"python -m git_pf.testing.scripted check --task-seed {plan.seed}"
    rows, ratios = [], []
    executors.make("ray", address=address).start()  # connected once, as the fan-outs are: not in a run's time
    with FakeLLM(scripted.ScriptedModel(plan)) as fake:
        record(repo, agent, name="case", fs_root=world, upstreams=[fake.url])
        blame(repo, "case", agent, BlameOptions(oracle=oracle, k=2, steps=(plan.step, plan.step), perturb="resample",
                                                upstreams=[fake.url], name="warm", mount=False, executor="ray",
                                                ray_address=address))  # the node's cache and Ray's workers, warm
        for again in range(repeat):
            rates, outcomes = {}, {}
            for executor in ("local", "ray"):
                opts = BlameOptions(oracle=oracle, k=k, steps=(plan.step - 1, plan.step), perturb="resample", jobs=2,
                                    upstreams=[fake.url], name=f"{executor}{again}", mount=False, executor=executor,
                                    ray_address=address if executor == "ray" else None)
                load = os.getloadavg()[0]
                t0 = time.perf_counter()
                out = blame(repo, "case", agent, opts)
                took = time.perf_counter() - t0
                rates[executor] = len(out["trials"]) / took * 60
                outcomes[executor] = [(t["step"], t["trial"], t["outcome"]) for t in out["trials"]]
                rows.append((f"{executor} ({len(out['trials'])} trials)", f"{rates[executor]:.1f} trials/min",
                             f"{took:.1f} s, decisive step {out['decisive']} (load {load:.1f})"))
            ratios.append(rates["ray"] / rates["local"])
            rows.append(("ray against --jobs 2", f"{ratios[-1]:.2f}x",
                         "same outcomes" if outcomes["local"] == outcomes["ray"] else "OUTCOMES DIFFER"))
    if repeat > 1:
        rows.append((f"ray against --jobs 2, median of {repeat}", f"{statistics.median(ratios):.2f}x", ""))
    report(f"Blame trials per minute, the scripted agent (task {plan.seed}), k={k}", rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_scale")
    ap.add_argument("--forks", default="50,200,1000")
    ap.add_argument("--files", default="1,400")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("-k", type=int, default=3)
    ap.add_argument("--no-blame", action="store_true")
    ap.add_argument("--no-fanout", action="store_true")
    args = ap.parse_args(argv)
    try:
        import ray  # noqa: F401
    except ImportError:
        print("bench_scale: Ray is not installed (pip install 'git-pf[ray]'); skipped")
        return 0
    from ray_helpers import ray_cluster
    from transport_helpers import BIN, git_daemon

    os.environ.update(git_env(), PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    with workdir("scale") as base:
        (base / "served").mkdir()
        with git_daemon(base / "served") as url, ray_cluster(base, env={"PATH": os.environ["PATH"]}) as (address, _):
            if not args.no_fanout:
                _fanouts(base, url, address, [int(x) for x in args.forks.split(",")],
                         [int(x) for x in args.files.split(",")], max(1, args.repeat))
            if not args.no_blame:
                _blame(base, url, address, args.k, max(1, args.repeat))
    return 0


if __name__ == "__main__":
    sys.exit(main())
