"""Where a step image's world comes from: the sandbox as it was when a request arrived.

``LiveWorld`` captures a sandbox again and again in one long-lived recording
process: its stat cache stays in memory from one capture to the next (the
cache file is read at the first capture and written once, by ``save``), and
a file watcher (``fswatch``) names the directories the agent touched, so a
step lists only those and reads only the files that changed. ``Given`` hands
a capture taken earlier to ``snapshot.take``; ``inherited`` is an image's
world as it stands (a run with no sandbox directory). ``WorldCheck`` is the
world check of a replay and of a run's prefix: the live world, captured the same
way, against the recorded step's (docs/record.md, "The world check"). Writes
git and side-store objects through the capture; never refs.
"""
from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from pathlib import Path

from ..core import config
from ..image import manifest as img
from ..image.tree import TreeWriter
from ..layers.world import attrs as attrs_mod
from ..layers.world.capture import Capture, CaptureStats, capture
from ..layers.world.statcache import StatCache
from ..ops.snapshot import resolve_fs_root
from ..store.packfile import current
from ..core.fswatch import DirWatch, unchanged_test

ROOT_TRAILER = "Pf-Run-Root"  # on step 0: the sandbox's absolute path when it was recorded
CWD_TRAILER = "Pf-Run-Cwd"  # on step 0: the child's working directory then
SHOWN_PATHS = 3  # differing paths named in a world divergence's line
PATCH_LINES = 20  # lines of the short patch a world divergence keeps


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
        pack = current(git)
        if self._last is not None and not (pack.has(bytes.fromhex(self._last.tree)) if pack
                                           else self._last.tree in git.odb):
            self.cache = None  # the last capture's objects were never written (storage trouble): start over
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


def step_images(git, tip: str) -> dict[int, str]:
    """Step number -> the id of its step image on ``tip``'s first-parent line (a run's final
    image, which repeats its last step, aside; for a fork, its own step N)."""
    from .steps import RUN_END_TRAILER, STEP_TRAILER, parse_step

    out: dict[int, str] = {}
    oid = tip
    while oid is not None:
        commit = git[oid]
        trailers = dict(img.parse_trailers(commit.message))
        step = parse_step(trailers.get(STEP_TRAILER, ""))
        if step is not None and RUN_END_TRAILER not in trailers:
            out.setdefault(step, oid)
        if step == 0:
            break
        oid = str(commit.parent_ids[0]) if commit.parent_ids else None
    return out


def world_tree(git, image: str) -> str:
    """The id of an image's world tree (the empty tree's when it has none)."""
    tree = img.subtree(git, str(git[image].tree_id), img.WORLD_FS)
    return tree if tree is not None else TreeWriter(git).write([]).hex()


@dataclass
class WorldDivergence:
    """The live world differs from the recorded one at ``step``: the first paths and a short patch."""

    step: int
    line: str
    paths: list[str]
    patch: str

    def to_json(self) -> dict:
        return {"step": self.step, "line": self.line, "paths": self.paths, "patch": self.patch}


def _lines(n: int, word: str) -> str:
    return f"{n} line{'s' if n != 1 else ''} {word}"


def describe(git, old: str, new: str) -> tuple[list[str], list[str], str]:
    """How tree ``new`` differs from ``old``: each path with what changed (``CHANGELOG.md (2
    lines added)``), the paths alone, and the first lines of the patch."""
    diff = git.diff(git[old], git[new], context_lines=1)
    named, paths, patch = [], [], []
    for p in diff:
        d = p.delta
        path = d.new_file.path if d.status_char() != "D" else d.old_file.path
        if d.status_char() == "A":
            what = "new file"
        elif d.status_char() == "D":
            what = "deleted"
        elif d.is_binary:
            what = "binary, changed"
        else:
            _, added, removed = p.line_stats
            what = (f"{_lines(added, 'added')}, {removed} removed" if added and removed else
                    _lines(added, "added") if added else _lines(removed, "removed") if removed else "mode changed")
        named.append(f"{path} ({what})")
        paths.append(path)
        if len(patch) < PATCH_LINES:
            patch += (p.text or "").splitlines()[:PATCH_LINES - len(patch)]
    return named, paths, "\n".join(patch)


class WorldCheck:
    """Checks a replayed world against the recorded step worlds: when request N arrives, the
    world must be step N's (its tree id; the stat cache and the watcher keep each look to the
    directories that changed)."""

    def __init__(self, repo, world: Path, tip: str, upto: int | None = None):
        git = repo.git
        self.repo = repo
        images = step_images(git, tip)
        self.expected = {s: world_tree(git, oid) for s, oid in images.items() if upto is None or s <= upto}
        empty = TreeWriter(git).write([]).hex()
        # a run recorded without a sandbox has no world to check (its steps' worlds are all empty)
        self.active = 0 in images and (recorded_place(git, images[0])[0] is not None
                                       or any(t != empty for t in self.expected.values()))
        self.live = LiveWorld(repo, Path(world), ())
        self._lock = threading.Lock()
        self.checked = 0
        # the first look hashes every file: done meanwhile, while the agent starts up
        self._warm = threading.Thread(target=self.tree, name="pf-world-check", daemon=True) if self.active else None
        if self._warm is not None:
            self._warm.start()

    def tree(self) -> str:
        with self._lock:
            cap = self.live.capture(self.repo, None)
            self.checked += 1
            return cap.tree

    def check(self, step: int, want: str | None = None, where: str | None = None) -> WorldDivergence | None:
        """None when the world now is step ``step``'s (or ``want``, a tree id); else what differs."""
        want = want or self.expected.get(step)
        if want is None or not self.active:
            return None
        live = self.tree()
        if live == want:
            return None
        named, paths, patch = describe(self.repo.git, want, live)
        shown = ", ".join(named[:SHOWN_PATHS]) + (f" and {len(named) - SHOWN_PATHS} more" if len(named) > SHOWN_PATHS else "")
        return WorldDivergence(step, f"{where or f'step {step}'}: the world differs: {shown or 'its attributes'}",
                               paths, patch)

    def close(self) -> None:
        if self._warm is not None:
            self._warm.join()
        self.live.watch.close()


def place(fs_root: Path | None) -> tuple[tuple[str, str], ...]:
    """Step 0's trailers saying where a recording ran: the sandbox's absolute path and the child's
    cwd (none without a sandbox, and none that a trailer cannot hold)."""
    if fs_root is None:
        return ()
    found = ((ROOT_TRAILER, os.path.abspath(fs_root)), (CWD_TRAILER, os.getcwd()))
    return tuple((k, v) for k, v in found if v.isprintable() and v.strip() == v)


def recorded_place(git, first: str) -> tuple[str | None, str | None]:
    """Where the run whose step 0 is ``first`` was recorded: (sandbox path, cwd), None where unknown."""
    trailers = dict(img.parse_trailers(git[first].message))
    root, cwd = trailers.get(ROOT_TRAILER), trailers.get(CWD_TRAILER)
    return (root if root and os.path.isabs(root) else None, cwd if cwd and os.path.isabs(cwd) else None)
