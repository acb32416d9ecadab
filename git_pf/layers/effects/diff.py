"""The effects layer's part of ``git pf diff``: ledger entries only in B (added) and only in A
(removed), compared by entry hash. The ledgers are parsed by their reader (``layercheck``).
Read-only.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import manifest as img
from ...image.layercheck import load
from ..registry import DiffPart
from .ledger import entry_hash


@dataclass
class EffectsDiff(DiffPart):
    added: int = 0
    removed: int = 0

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        return [f"effects: {self.added} added, {self.removed} removed"]


def diff(git, a: img.ImageInfo, b: img.ImageInfo) -> EffectsDiff:
    ea, eb = ({entry_hash(e) for e in load(git, x, img.EFFECTS_LEDGER, [])} for x in (a, b))
    return EffectsDiff(len(eb - ea), len(ea - eb))
