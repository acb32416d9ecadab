"""Human-readable rendering shared by the command modules (sizes, dates, images)."""
from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..image import ImageInfo


def size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"


def date(image: ImageInfo) -> str:
    tz = dt.timezone(dt.timedelta(minutes=image.offset))
    return dt.datetime.fromtimestamp(image.time, tz).strftime("%a %b %d %H:%M:%S %Y %z")


def layers(image: ImageInfo) -> list[str]:
    """One line per layer summary recorded in the manifest."""
    out = []
    for name, summary in sorted(image.manifest.get("layers", {}).items()):
        parts = []
        for key, value in (summary or {}).items():
            parts.append(f"{key}={size(value) if key == 'bytes' and isinstance(value, int) else value}")
        out.append(f"{name:<8} {' '.join(parts)}")
    return out
