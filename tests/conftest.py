"""Shared fixtures: a real git-pf repository per test, checked with ``git fsck`` afterwards,
and a runner for the real ``git-pf`` command."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


@pytest.fixture
def run_pf(tmp_path):
    """Run ``git-pf`` as a user would; returns the CompletedProcess (text mode)."""

    def run(*args, cwd=None, check=True, input=None, env=None):
        full_env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
        full_env.update(env or {})
        proc = subprocess.run(["git-pf", *map(str, args)], cwd=cwd or tmp_path, capture_output=True,
                              text=True, input=input, env=full_env)
        if check and proc.returncode != 0:
            raise AssertionError(f"git-pf {' '.join(map(str, args))} exited {proc.returncode}: {proc.stderr}")
        return proc

    return run


def git_fsck_clean(repo_dir: Path) -> None:
    proc = subprocess.run(["git", "fsck", "--full", "--strict", "--no-dangling"], cwd=repo_dir,
                          capture_output=True, text=True)
    assert proc.returncode == 0, f"git fsck failed: {proc.stdout}{proc.stderr}"
    bad = [l for l in (proc.stdout + proc.stderr).splitlines() if l and not l.startswith(("notice:", "Checking"))]
    assert not bad, f"git fsck complained: {bad}"


@pytest.fixture
def repo(tmp_path):
    """A fresh git-pf repository at tmp_path/repo; ``git fsck --full`` must be clean afterwards."""
    from git_pf import Repo
    from git_pf.executors.worlds import WorldCache

    r, _ = Repo.init(tmp_path / "repo")
    yield r
    WorldCache.clear(r)  # the worlds its replays and runs kept (docs/record.md, "The world cache")
    git_fsck_clean(tmp_path / "repo")
