"""Human-readable quantities (sizes in B / KiB / MiB / GiB), for the CLI and the lines a
layer adds to ``git pf show``. Pure; imports nothing of git-pf."""
from __future__ import annotations


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
