"""Snapshot, incremental snapshot, large-file ingest and fork speed against git, in one run.

    python -m benchmarks.bench_snapshot [--files 10000] [--mb 100] [--large-gb 1] [--forks 1000]
"""
from __future__ import annotations

import argparse
import os
import random
import time

from git_pf import Repo

from .common import git_env, report, sh, timed, verdict, workdir


def make_tree(root, files: int, total_bytes: int, seed: int = 1) -> list:
    rng = random.Random(seed)
    per = max(1, total_bytes // files)
    paths = []
    for i in range(files):
        d = root / f"d{i % 100:02d}" / f"s{(i // 100) % 10}"
        d.mkdir(parents=True, exist_ok=True)
        p = d / f"f{i}.txt"
        p.write_bytes(rng.randbytes(per // 2).hex().encode()[:per])  # text-like, compressible 2:1
        paths.append(p)
    return paths


def bench_tree(base, files: int, mb: int) -> list:
    sb = base / "sb"
    paths = make_tree(sb, files, mb * 1024 * 1024)
    time.sleep(0.2)  # files written in the last 100 ms before a snapshot are re-read next time (racy window)
    repo, _ = Repo.init(base / "pf")
    t_pf, snap = timed(repo.snapshot, sb, name="main")
    gitdir = base / "plain"
    sh("git", "init", "-q", gitdir)
    env = dict(git_env(), GIT_DIR=str(gitdir / ".git"), GIT_WORK_TREE=str(sb))

    def git_add_commit():
        sh("git", "add", "-A", env=env)
        # gc.auto=0: past 6,700 loose objects the commit would start a detached `git gc` that
        # repacks this reference repository for seconds, on the cores the incremental run below
        # is timed on. (A detached gc never counted in git's own time.)
        sh("git", "-c", "gc.auto=0", "commit", "-q", "-m", "x", env=env)

    t_git, _ = timed(git_add_commit)
    for p in random.Random(2).sample(paths, len(paths) // 100):
        p.write_bytes(p.read_bytes()[::-1])
    cpu = time.process_time()
    t_inc, inc = timed(repo.snapshot, sb, name="main")
    cpu = time.process_time() - cpu
    return [
        (f"fresh snapshot, {files} files / {mb} MB", f"{t_pf:.2f} s", ""),
        ("git add -A && git commit, same tree", f"{t_git:.2f} s", ""),
        ("fresh / git", f"{t_pf / t_git:.2f}x", f"goal <= 1.0x  {verdict(t_pf <= t_git)}"),
        (f"incremental, 1% changed ({inc.stats.files_read} read)", f"{t_inc * 1000:.0f} ms", ""),
        ("incremental, CPU time (load does not inflate it)", f"{cpu * 1000:.0f} ms", ""),
        ("fresh / incremental", f"{t_pf / t_inc:.1f}x", f"goal >= 20x  {verdict(t_pf / t_inc >= 20)}"),
    ]


def bench_large(base, gb: float) -> list:
    sb = base / "big"
    sb.mkdir()
    size = int(gb * 1024**3)
    with open(sb / "weights.bin", "wb") as f:
        chunk = os.urandom(64 * 1024 * 1024)
        for _ in range(size // len(chunk)):
            f.write(chunk[::-1] if random.random() < 0.5 else chunk)
            chunk = os.urandom(len(chunk)) if random.random() < 0.25 else chunk
    repo, _ = Repo.init(base / "pf-big")
    t_pf, _ = timed(repo.snapshot, sb, name="main")
    gitdir = base / "plain-big"
    sh("git", "init", "-q", gitdir)
    env = dict(git_env(), GIT_DIR=str(gitdir / ".git"), GIT_WORK_TREE=str(sb))
    t_git, _ = timed(sh, "git", "add", "weights.bin", env=env)
    mb = size / 1024**2
    return [
        (f"ingest {gb:g} GiB file (git-pf)", f"{t_pf:.2f} s  {mb / t_pf:.0f} MB/s", ""),
        ("git add of the same file", f"{t_git:.2f} s  {mb / t_git:.0f} MB/s", ""),
        ("git / git-pf", f"{t_git / t_pf:.1f}x", f"goal >= 5x  {verdict(t_git / t_pf >= 5)}"),
    ]


def bench_forks(base, n: int) -> list:
    sb = base / "small"
    make_tree(sb, 100, 100_000)
    repo, _ = Repo.init(base / "pf-forks")
    repo.snapshot(sb, name="main")
    t, forks = timed(repo.fork, "main", n)
    assert len({f.id for f in forks}) == n
    per = t / n * 1000
    return [(f"{n} forks", f"{t:.2f} s", ""), ("per fork", f"{per:.2f} ms", f"goal <= 2 ms  {verdict(per <= 2)}")]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--mb", type=int, default=100)
    ap.add_argument("--large-gb", type=float, default=1.0)
    ap.add_argument("--forks", type=int, default=1000)
    args = ap.parse_args(argv)
    with workdir("snapshot") as base:
        report("snapshot vs git", bench_tree(base, args.files, args.mb))
    with workdir("large") as base:
        report("large-file ingest vs git add", bench_large(base, args.large_gb))
    with workdir("forks") as base:
        report("forks", bench_forks(base, args.forks))


if __name__ == "__main__":
    main()
