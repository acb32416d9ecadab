"""What ``git pf show`` adds for the KV layer (``Layer.summary``): how many of an image's
pages, and their bytes, its first parent already holds. Reads page tables; writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core.units import size
from .table import sharing


@dataclass(frozen=True)
class CacheShow:
    sharing: dict  # tokens, pages, bytes, shared_pages, shared_bytes (``table.sharing``)

    def to_json(self) -> dict:
        return self.sharing

    def lines(self) -> list[str]:
        s = self.sharing
        return [f"{'':<8} shared with parent: {s['shared_pages']} of {s['pages']} pages ({size(s['shared_bytes'])})"]


def summary(repo, image) -> CacheShow | None:
    """The cache's sharing with the first parent; None when the image has no cache."""
    found = sharing(repo, image)
    return None if found is None else CacheShow(found)
