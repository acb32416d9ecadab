"""Keeping the object database tidy as images accumulate.

Snapshots write their new objects as one pack each; like git's porcelain,
git-pf starts ``git gc --auto`` in the background once the pack count passes
``gc.autoPackLimit`` (git's default 50), so lookups stay fast. Never blocks
the command that triggered it and never touches the side store. It may run
while a recording writes its steps: git-pf writes packs only, never a loose
object, so nothing a gc removes is something a write depends on
(docs/format.md, "Writing objects").
"""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pygit2

DEFAULT_PACK_LIMIT = 50


def pack_limit(repo: pygit2.Repository) -> int:
    try:
        return repo.config.get_int("gc.autoPackLimit")
    except (KeyError, ValueError, pygit2.GitError):
        return DEFAULT_PACK_LIMIT


def auto_gc(repo: pygit2.Repository) -> bool:
    """Start ``git gc --auto`` detached when there are too many packs; True when started."""
    limit = pack_limit(repo)
    pack_dir = Path(repo.path) / "objects" / "pack"
    if limit <= 0 or os.environ.get("GIT_PF_NO_AUTO_GC"):
        return False
    try:
        packs = sum(1 for name in os.listdir(pack_dir) if name.endswith(".pack"))
    except FileNotFoundError:
        return False
    if packs <= limit:
        return False
    try:
        subprocess.Popen(["git", "--git-dir", repo.path, "gc", "--auto", "--quiet"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    except OSError:
        return False
    return True
