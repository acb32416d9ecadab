"""Limits on what a read of untrusted data may cost: their defaults and the values in force.

Data from an image is untrusted (docs/security.md, "Bounded reads"): a pointer's
size, a side-store frame's decoded size and a JSON line's length are checked
against these before anything is allocated for them. ``config.limits`` reads
the ``pf.*`` keys; ``Repo`` puts them in force for the process (``use``), as
git reads its own config into process-wide settings. Pure values; no I/O.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    max_object: int  # pf.maxObjectSize: the largest size a pointer may declare
    max_frame: int  # pf.maxFrameSize: the most one side-store frame may decode to
    max_json_line: int  # pf.maxJsonLine: the longest JSONL line / JSON document read from an image
    max_blob: int = 256 << 20  # pf.maxBlobSize: the largest git blob of an image read whole into memory


# No legitimate image comes near these: the largest single objects are whole tensors
# (a 70B model's embedding is 2 GiB in bf16, 4 GiB in fp32); FastCDC chunks are at most
# 2 MiB, KV pages a few MiB; JSON lines are messages and ledger entries. A git blob of an image
# is a layer file or a world file under pf.largeFileThreshold (1 MiB by default): one larger than
# pf.maxBlobSize is refused as a layer file, and a world file that large is streamed (checkout,
# mount) or left unread (a patch shows it as binary, a merge keeps git's conflict labels in it).
DEFAULT = Limits(max_object=1 << 40, max_frame=4 << 30, max_json_line=64 << 20)

_active = DEFAULT


def active() -> Limits:
    """The limits in force in this process (the last ``use``d, else ``DEFAULT``)."""
    return _active


def use(limits: Limits) -> None:
    global _active
    _active = limits
