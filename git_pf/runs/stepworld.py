"""Where a step image's world comes from: the sandbox as it was when a request arrived.

``LiveWorld`` captures a sandbox again and again in one long-lived recording
process: its stat cache stays in memory from one capture to the next (the
cache file is read at the first capture and written once, by ``save``), and
a file watcher (``fswatch``) names the directories the agent touched, so a
step lists only those and reads only the files that changed. ``Given`` hands
a capture taken earlier to ``snapshot.take``; ``inherited`` is an image's
world as it stands (a run with no sandbox directory). Writes git and
side-store objects through the capture; never refs.
"""
from __future__ import annotations

import os
from pathlib import Path

from .. import config, image as img
from ..gittree import TreeWriter
from ..layers.world import attrs as attrs_mod
from ..layers.world.capture import Capture, CaptureStats, capture
from ..layers.world.statcache import StatCache
from ..snapshot import resolve_fs_root
from .fswatch import DirWatch, unchanged_test


class LiveWorld:
    """A sandbox directory captured by one process at every step (a ``snapshot.WorldSource``)."""

    def __init__(self, repo, fs_root: Path, ignore: tuple[str, ...]):
        self.ignore = tuple(ignore)
        self.root = resolve_fs_root(fs_root, repo.git_dir)
        self.name = os.fsdecode(os.path.basename(self.root))
        self.exclude = {os.fsencode(os.path.realpath(repo.git_dir))}
        self.cache: StatCache | None = None
        self._last: Capture | None = None
        self.watch = DirWatch(self.root, self.exclude)  # before the first capture: no change goes unseen

    def capture(self, repo, parent) -> Capture:
        git = repo.git
        threshold = config.large_file_threshold(git)
        settings = (threshold, self.ignore)
        dirty = self.watch.changed()
        unchanged = None
        if self.cache is None or self.cache.settings != settings:
            self.cache = StatCache.load(repo.git_dir, self.root, settings, lambda t: t in git.odb)
        else:  # start from what the captures so far saw; skip what the watcher says is as it was
            self.cache = StatCache(self.cache.path, settings, self._records())
            unchanged = unchanged_test(dirty) if dirty is not None else None
        self._last = capture(git, repo.store, self.root, threshold=threshold, ignore=list(self.ignore),
                             cache=self.cache, exclude=self.exclude, unchanged=unchanged)
        return self._last

    def done(self, cap: Capture) -> None:
        """Nothing per capture: ``save`` writes the stat cache file once."""

    def _records(self) -> dict:
        """Every directory's latest record: a directory the last capture reused whole with its
        parent has its record only in the cache it started from."""
        return {**self.cache.old, **self.cache.new}

    def save(self) -> None:
        self.watch.close()
        if self.cache is not None and self._last is not None:
            self.cache.new = self._records()
            self.cache.save(self.root, self._last.tree)


class Given:
    """A world source that hands over a capture taken before (``StepWriter.arrived``)."""

    def __init__(self, cap: Capture, name: str):
        self.cap, self.name = cap, name

    def capture(self, repo, parent) -> Capture:
        return self.cap

    def done(self, cap: Capture) -> None:
        pass


def inherited(repo, image: img.ImageInfo | None) -> Capture:
    """The world of ``image`` as a capture (an empty world when there is none)."""
    git = repo.git
    tree = img.subtree(git, image.tree, img.WORLD_FS) if image else None
    if tree is None:
        return Capture(TreeWriter(git).write([]).hex(), [], CaptureStats())
    data = img.read_file(git, image.tree, img.WORLD_ATTRS)
    attrs = list(attrs_mod.decode(data).values()) if data else []
    summary = image.manifest.get("layers", {}).get("world") or {}
    stats = CaptureStats(**{k: summary.get(k, 0) for k in ("files", "bytes", "pointers")})
    return Capture(tree, attrs, stats)
