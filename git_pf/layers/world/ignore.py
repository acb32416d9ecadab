"""Which sandbox paths a snapshot skips: ``.gitignore`` files plus ``--ignore`` patterns.

Semantics follow git: each directory's ``.gitignore`` applies below it, deeper
files win, ``!`` re-includes, a trailing ``/`` matches directories only, and
an ignored directory is never entered. ``--ignore`` patterns act like a
``.gitignore`` at the sandbox root that takes precedence over every
``.gitignore`` file (as git's command-line excludes do). The
top-level ``.pf/`` directory (where checkout writes non-world layers) is
always skipped. Each stack has a ``token`` (its ``.gitignore`` files by
content digest) so a cache can tell that the same rules apply. Used by both
the ``--fs-root`` capture and the mount snapshot. Pure path logic plus reading
``.gitignore`` files.
"""
from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass

import pathspec

ALWAYS_IGNORED_TOP = {b".pf"}


@dataclass(frozen=True)
class _Level:
    prefix: str  # directory of the .gitignore, relative to the root, "" or ending in "/"
    spec: pathspec.GitIgnoreSpec
    digest: bytes  # SHA-1 of the .gitignore's bytes


@functools.lru_cache(maxsize=256)  # a process taking snapshot after snapshot compiles each file once
def _compile(data: bytes) -> pathspec.GitIgnoreSpec:
    return pathspec.GitIgnoreSpec.from_lines(data.decode("utf-8", "surrogateescape").splitlines())


class IgnoreRules:
    """An immutable stack of ignore specs; ``descend`` returns the stack for a subdirectory."""

    def __init__(self, levels: tuple[_Level, ...] = (), override: pathspec.GitIgnoreSpec | None = None):
        self._levels = levels
        self._override = override
        self.token = tuple((level.prefix, level.digest) for level in levels)  # --ignore: in the cache settings

    @classmethod
    def from_patterns(cls, extra_patterns: list[str]) -> "IgnoreRules":
        """The ``--ignore`` patterns alone, before any ``.gitignore`` file."""
        return cls((), pathspec.GitIgnoreSpec.from_lines(extra_patterns) if extra_patterns else None)

    def descend(self, abs_dir: bytes, rel_dir: bytes) -> "IgnoreRules":
        """Rules inside ``rel_dir``: these plus its ``.gitignore`` if it has one."""
        try:
            with open(os.path.join(abs_dir, b".gitignore"), "rb") as f:
                data = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError):
            return self
        return self.with_file(rel_dir, data)

    def with_file(self, rel_dir: bytes, data: bytes) -> "IgnoreRules":
        """Rules inside ``rel_dir`` whose ``.gitignore`` holds ``data`` (read from anywhere:
        a mount snapshot reads it from the upper layer or the image)."""
        prefix = os.fsdecode(rel_dir) + "/" if rel_dir else ""
        level = _Level(prefix, _compile(data), hashlib.sha1(data).digest())
        return IgnoreRules(self._levels + (level,), self._override)

    @property
    def empty(self) -> bool:
        """True when no pattern applies here (nothing can be ignored)."""
        return not self._levels and self._override is None

    def ignored(self, rel_path: bytes, is_dir: bool) -> bool:
        if self.empty:
            return False
        path = os.fsdecode(rel_path) + ("/" if is_dir else "")
        if self._override is not None:
            result = self._override.check_file(path)
            if result.include is not None:
                return bool(result.include)
        for level in reversed(self._levels):
            result = level.spec.check_file(path[len(level.prefix) :])
            if result.include is not None:
                return bool(result.include)
        return False
