"""Plain helpers on sequences, shared by the layers: no git, no I/O."""
from __future__ import annotations

from typing import Sequence


def common_prefix(a: Sequence, b: Sequence) -> int:
    """How many leading items ``a`` and ``b`` share (messages of two traces, token ids of two contexts)."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n
