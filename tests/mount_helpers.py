"""Shared fixtures for the mount tests: a repo with an image, the CLI, real FUSE mounts.

Every mount a test makes is unmounted (and its daemon stopped) in teardown,
even when the test fails.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import stat
import subprocess
import shutil
import sys
from pathlib import Path

import pytest

VENV_BIN = str(Path(sys.executable).parent)


def fuse_skip_reason() -> str | None:
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing: FUSE mounts cannot run here"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is not on PATH (the fuse3 package): FUSE mounts cannot run here"
    return None


requires_fuse = pytest.mark.skipif(fuse_skip_reason() is not None, reason=fuse_skip_reason() or "")


class Pf:
    """Runs ``git pf`` in a repository and remembers every mount for teardown."""

    def __init__(self, root: Path):
        self.root = root
        self.repo = root / "repo"
        self.env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), HF_HUB_OFFLINE="1",
                        GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@e", GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@e")
        self.mountpoints: set[str] = set()

    def run(self, *args: str, check: bool = True, cwd: Path | None = None) -> subprocess.CompletedProcess:
        proc = subprocess.run(["git", "pf", *args], cwd=cwd or self.repo, env=self.env, capture_output=True, text=True,
                              timeout=120)
        if check and proc.returncode != 0:
            raise AssertionError(f"git pf {' '.join(args)} failed ({proc.returncode}): {proc.stderr}")
        return proc

    def mount(self, rev: str, where: Path, *extra: str) -> Path:
        self.mountpoints.add(os.path.abspath(where))
        self.run("mount", rev, str(where), *extra)
        return where

    def states(self) -> list[dict]:
        """The mount records on disk; one a daemon removes while we look is left out."""
        base = self.repo / ".git" / "pf" / "mounts"
        out = []
        for p in sorted(base.glob("*/mount.json")) if base.is_dir() else []:
            try:
                out.append(json.loads(p.read_text()))
            except FileNotFoundError:
                continue
        return out

    def cleanup(self) -> None:
        for rec in self.states():
            self.mountpoints.add(rec["mountpoint"])
        for mp in sorted(self.mountpoints, reverse=True):
            subprocess.run(["fusermount3", "-u", "-z", mp], capture_output=True)
        for rec in self.states():
            try:
                os.kill(rec["pid"], signal.SIGKILL)
            except (ProcessLookupError, PermissionError, OSError):
                pass


@pytest.fixture
def pf(tmp_path):
    p = Pf(tmp_path)
    p.repo.mkdir()
    subprocess.run(["git", "init", "-q", str(p.repo)], check=True)
    subprocess.run(["git", "-C", str(p.repo), "config", "pf.largeFileThreshold", "65536"], check=True)
    try:
        yield p
    finally:
        p.cleanup()


def make_sandbox(root: Path) -> Path:
    """A small world with every kind of thing a checkout reproduces."""
    sb = root / "sandbox"
    (sb / "src" / "pkg").mkdir(parents=True)
    (sb / "empty" / "deeper").mkdir(parents=True)
    (sb / "src" / "main.py").write_text("print('hello')\n")
    (sb / "src" / "pkg" / "__init__.py").write_text("")
    (sb / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(sb / "run.sh", 0o755)
    (sb / "secret.txt").write_text("s3cret\n")
    os.chmod(sb / "secret.txt", 0o600)
    os.symlink("src/main.py", sb / "link")
    os.symlink("missing-target", sb / "dangling")
    os.setxattr(sb / "src" / "main.py", "user.origin", b"agent")
    big = random.Random(7).randbytes(3_000_000)  # several side-store chunks
    (sb / "data.bin").write_bytes(big)
    (sb / ".git").mkdir()  # a nested repository's directory: escaped in the tree
    (sb / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return sb


def snapshot(pf: Pf, sandbox: Path, *extra: str) -> str:
    return pf.run("snapshot", "--fs-root", str(sandbox), "-q", *extra).stdout.strip()


def describe(root: Path) -> dict[str, tuple]:
    """Everything a checkout promises about a tree: kinds, permission bits, content, links, xattrs."""
    out: dict[str, tuple] = {}
    for base, dirs, files in os.walk(root):
        for name in dirs + files:
            path = os.path.join(base, name)
            rel = os.path.relpath(path, root)
            st = os.lstat(path)
            xattrs = {} if stat.S_ISLNK(st.st_mode) else {
                n: os.getxattr(path, n) for n in os.listxattr(path) if n.startswith("user.")}
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), xattrs)
            else:
                digest = hashlib.sha256(Path(path).read_bytes()).hexdigest()
                out[rel] = ("file", stat.S_IMODE(st.st_mode), st.st_size, digest, xattrs)
    return out
