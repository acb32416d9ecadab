"""The default world source of a snapshot: a sandbox directory, captured with the stat cache.

``DirWorld`` is what ``snapshot.take`` captures when the request names no other
``WorldSource`` (a mount's upper layer, a run's step world); ``done`` saves the stat cache
once the image is written. Captures; writes no image, moves no ref.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import watch as cmdwatch
from ...core import config
from ...image.safepath import resolve_fs_root
from .capture import Capture, capture
from .statcache import StatCache


class DirWorld:
    """The default world source: a sandbox directory, captured with the stat cache."""

    def __init__(self, repo, fs_root: Path, ignore: tuple[str, ...]):
        self.repo, self.ignore = repo, ignore
        self.root = resolve_fs_root(fs_root, repo.git_dir)
        self.name = os.fsdecode(os.path.basename(self.root))
        self.cache: StatCache | None = None

    def capture(self, repo, parent) -> Capture:
        git = repo.git
        threshold = config.large_file_threshold(git)
        settings = (threshold, tuple(self.ignore))
        # under the command server, its file watcher may vouch for directories nothing changed in
        self.cache, unchanged = cmdwatch.load(self.root, StatCache.path_for(repo.git_dir, self.root),
                                              lambda: StatCache.load(repo.git_dir, self.root, settings,
                                                                     lambda t: t in git.odb))
        exclude = {os.fsencode(os.path.realpath(repo.git_dir))}
        return capture(git, repo.store, self.root, threshold=threshold, ignore=list(self.ignore), cache=self.cache,
                       exclude=exclude, unchanged=unchanged)

    def done(self, cap: Capture) -> None:
        self.cache.save(self.root, cap.tree)
        cmdwatch.saved(self.root, self.cache.path)
