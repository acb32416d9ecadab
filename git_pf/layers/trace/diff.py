"""The trace layer's part of ``git pf diff``: messages appended, or whether the history was
rewritten (A's messages are not a prefix of B's), and recorded exchanges (``trace/tape/``)
added / removed. The messages are parsed by their reader (``layercheck``), the tape's
entries are listed by ``tape.names`` (which checks them, and opens packed chunks). Read-only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import manifest as img
from ...image.layercheck import load
from ..registry import DiffPart
from . import messages, tape


@dataclass
class TraceDiff(DiffPart):
    before: int = 0
    after: int = 0
    appended: int = 0
    rewritten: bool = False  # True when A's messages are not a prefix of B's
    exchanges_added: int = 0  # recorded LLM exchanges (trace/tape/) only in B
    exchanges_removed: int = 0  # ... only in A

    @property
    def empty(self) -> bool:  # the counts before and after are no change
        return not (self.appended or self.rewritten or self.exchanges_added or self.exchanges_removed)

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        tape_part = (f"; tape {self.exchanges_added} added, {self.exchanges_removed} removed"
                     if self.exchanges_added or self.exchanges_removed else "")
        return [f"trace:   {self.before} -> {self.after} messages, "
                + ("history rewritten" if self.rewritten else f"{self.appended} appended") + tape_part]


def diff(git, a: img.ImageInfo, b: img.ImageInfo) -> TraceDiff:
    ma, mb = (load(git, x, img.TRACE_MESSAGES, []) for x in (a, b))
    prefix = messages.is_prefix(ma, mb)
    ta, tb = tape.names(git, a.tree), tape.names(git, b.tree)
    return TraceDiff(len(ma), len(mb), len(mb) - len(ma) if prefix else 0, not prefix, len(tb - ta), len(ta - tb))
