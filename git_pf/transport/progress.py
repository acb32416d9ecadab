"""Progress bars for transfers: rich on a terminal, nothing otherwise or when quiet.

Callers open a task and advance it; whether anything is drawn is decided
here once. Knows nothing of what is being transferred.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Callable, Iterator


class Progress:
    def __init__(self, quiet: bool = False):
        self.enabled = not quiet and sys.stderr.isatty()

    @property
    def git_flag(self) -> list[str]:
        """The flag that makes a nested git show or hide its own progress accordingly."""
        return ["--progress"] if self.enabled else ["--quiet"]

    @contextmanager
    def task(self, what: str, total: int) -> Iterator[Callable[[int], None]]:
        if not self.enabled or total == 0:
            yield lambda n: None
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

        with Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                 transient=True, console=Console(stderr=True)) as bar:
            tid = bar.add_task(what, total=total)
            yield lambda n: bar.advance(tid, n)
