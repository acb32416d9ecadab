"""The KV-cache layer's part of ``git pf diff``: the pages (and tokens) one image's cache has
that the other's has not. Reads page tables; never imports torch; writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..base import DiffPart
from .table import PATH, decode


@dataclass
class CacheDiff(DiffPart):
    tokens_before: int = 0
    tokens_after: int = 0
    pages_added: int = 0
    pages_removed: int = 0

    @property
    def empty(self) -> bool:
        return not (self.pages_added or self.pages_removed)

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        return [f"cache:   {self.tokens_before} -> {self.tokens_after} tokens, "
                f"{self.pages_added} pages added, {self.pages_removed} removed"]


def diff(git, a, b) -> CacheDiff | None:
    """None when neither image holds a cache."""
    from ...image.manifest import read_file

    tables = [read_file(git, x.tree, PATH) for x in (a, b)]
    if tables == [None, None]:
        return None
    ta, tb = (decode(t) if t is not None else None for t in tables)
    pa = {p.id for p in ta.pages} if ta else set()
    pb = {p.id for p in tb.pages} if tb else set()
    return CacheDiff(len(ta.tokens) if ta else 0, len(tb.tokens) if tb else 0, len(pb - pa), len(pa - pb))
