"""Human-readable rendering shared by the command modules (sizes, dates, images).

``size`` is ``git_pf.core.units.size`` (a layer's lines for ``show`` use it too).
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..image.manifest import ImageInfo


def size(n: int) -> str:
    from ..core.units import size as human_size  # imported when used: -h and --version load no git-pf module

    return human_size(n)


def date(image: ImageInfo) -> str:
    """As git prints a commit's date: the local time of its own offset, then the offset."""
    hours, minutes = divmod(abs(image.offset), 60)
    return time.strftime("%a %b %d %H:%M:%S %Y ", time.gmtime(image.time + image.offset * 60)) + \
        f"{'-' if image.offset < 0 else '+'}{hours:02d}{minutes:02d}"


def layers(image: ImageInfo) -> list[str]:
    """One line per layer summary recorded in the manifest."""
    out = []
    for name, summary in sorted(image.manifest.get("layers", {}).items()):
        parts = []
        for key, value in (summary or {}).items():
            parts.append(f"{key}={size(value) if key == 'bytes' and isinstance(value, int) else value}")
        out.append(f"{name:<8} {' '.join(parts)}")
    return out


def layer_details(repo, image: ImageInfo) -> dict:
    """What each registered layer adds to ``show`` (its ``Layer.summary``: ``to_json()`` and
    ``lines()``), by layer name, for the layers that add something to this image."""
    from ..layers import registry

    out = {}
    for layer in registry.layers():
        found = layer.summary(repo, image)
        if found is not None:
            out[layer.name] = found
    return out
