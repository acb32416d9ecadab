"""Helpers shared by the benchmarks: timing, temporary trees, result tables.

Benchmarks print ratios against a reference measured in the same run; they
never assert. Nothing here is imported by the package.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed(fn, *args, **kwargs) -> tuple[float, object]:
    t0 = time.perf_counter()
    result = fn(*args, **kwargs)
    return time.perf_counter() - t0, result


def sh(*args, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(list(map(str, args)), cwd=cwd, env=env, check=True, capture_output=True)


@contextlib.contextmanager
def workdir(name: str):
    base = Path(tempfile.mkdtemp(prefix=f"pf-bench-{name}-", dir=os.environ.get("PF_BENCH_DIR")))
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


def git_env() -> dict:
    return dict(os.environ, GIT_AUTHOR_NAME="bench", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="bench",
                GIT_COMMITTER_EMAIL="b@b")


def report(title: str, rows: list[tuple[str, str, str]]) -> None:
    """Print a small table: (measure, value, goal/verdict)."""
    print(f"\n## {title}")
    width = max(len(r[0]) for r in rows)
    for name, value, goal in rows:
        print(f"  {name:<{width}}  {value:>22}  {goal}")
    sys.stdout.flush()


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def recorded_run(base: Path, agent_source: str, upstream: str, fill=None):
    """A repository at ``base/repo`` holding one recorded run ``run`` of the Python agent
    ``agent_source`` (written to ``base/agent.py``, its sandbox ``base/world``, ``fill(world)``
    writing what it starts with) against the LLM server at ``upstream``; returns (the opened
    ``Repo``, the agent's path)."""
    from git_pf import Repo

    agent = base / "agent.py"
    agent.write_text(agent_source)
    (base / "world").mkdir()
    if fill is not None:
        fill(base / "world")
    pf = [sys.executable, "-m", "git_pf"]
    subprocess.run([*pf, "init", str(base / "repo")], check=True, capture_output=True)
    subprocess.run([*pf, "record", "--name", "run", "--fs-root", str(base / "world"), "--upstream", upstream,
                    "--", sys.executable, str(agent)], cwd=base / "repo", check=True, capture_output=True)
    return Repo.open(base / "repo"), agent
