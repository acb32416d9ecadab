"""Shared fixtures of the merge tests: images built from declarative worlds, and plain git
repositories holding the same trees for comparison with ``git merge-tree --write-tree``."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from git_pf.image import manifest as img

Files = dict[str, bytes | str]


def write_world(root: Path, files: Files) -> None:
    """Make ``root`` hold exactly ``files`` (path -> content; a path ending in '*' is executable)."""
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    for name, data in files.items():
        execable = name.endswith("*")
        path = root / name.rstrip("*")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        os.chmod(path, 0o755 if execable else 0o644)


def snap(repo, branch: str, files: Files, **layers) -> img.ImageInfo:
    """Snapshot ``files`` as the next image of ``branch``."""
    with tempfile.TemporaryDirectory() as d:
        sandbox = Path(d) / "sb"
        write_world(sandbox, files)
        return repo.snapshot(sandbox, name=branch, allow_empty=True, **layers).image


def world(repo, image) -> str:
    return img.subtree(repo.git, image.tree, img.WORLD_FS) or "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


def git(cwd, *args, env=None) -> str:
    full = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
                GIT_COMMITTER_EMAIL="t@t", **(env or {}))
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, env=full)
    if proc.returncode not in (0, 1):
        raise AssertionError(f"git {args} failed: {proc.stderr.decode()}")
    return proc.stdout.decode("utf-8", "surrogateescape")


class PlainRepo:
    """A plain git repository whose commits are made from real files with ``git add``."""

    def __init__(self, path: Path):
        self.path = path
        path.mkdir(parents=True)
        git(path, "init", "-q")
        self.work = path

    def commit(self, files: Files, parents: list[str], date: str | None = None) -> str:
        for entry in os.listdir(self.work):
            if entry != ".git":
                p = self.work / entry
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        for name, data in files.items():
            path = self.work / name.rstrip("*")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data.encode() if isinstance(data, str) else data)
            os.chmod(path, 0o755 if name.endswith("*") else 0o644)
        git(self.work, "add", "-A")
        tree = git(self.work, "write-tree").strip()
        args = ["commit-tree", tree, "-m", "c"]
        for p in parents:
            args += ["-p", p]
        env = {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date} if date else None
        return git(self.work, *args, env=env).strip()

    def merge_tree(self, ours: str, theirs: str) -> tuple[bool, str, set[str]]:
        """(clean, tree id, conflicted paths) from ``git merge-tree --write-tree``."""
        proc = subprocess.run(["git", "merge-tree", "--write-tree", "-z", "--name-only", ours, theirs],
                              cwd=self.work, capture_output=True)
        assert proc.returncode in (0, 1), proc.stderr
        fields = proc.stdout.split(b"\0")
        paths = set()
        for f in fields[1:]:
            if not f:
                break
            paths.add(f.decode())
        return proc.returncode == 0, fields[0].decode(), paths

    def stages(self, ours: str, theirs: str) -> list[str]:
        proc = subprocess.run(["git", "merge-tree", "--write-tree", ours, theirs], cwd=self.work, capture_output=True)
        return [l for l in proc.stdout.decode().splitlines()[1:] if "\t" in l]


def conflicted_paths(result) -> set[str]:
    world = next(r for r in result.layers if r.layer == "world")
    return {c["path"] for c in world.report.get("conflicts", []) if c["path"]}
