"""Where fanned-out work runs (docs/scale.md): an ``Executor`` maps one function over many items.

``local`` runs them on threads of this process (``--jobs N``); ``ray`` submits
them as tasks to a Ray cluster (``--executor ray``), imported only when chosen.
What a cluster task is given is its own dataclass (a blame trial's, a fork's):
commit ids, the remote's URL and store settings, parameters and the agent
command, never a path of the driver's machine nor a secret (``node`` is the
worker's side). ``make`` picks one by name; bad names are one line, exit 2.
``chunks`` cuts work into a cluster's tasks, several items each; ``worlds``
keeps one world directory for the items a worker runs one after another.
"""
from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence, TypeVar

from ..core.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")
KINDS = ("local", "ray")


class Executor(Protocol):
    """Runs ``fn`` over ``items``; results in the items' order."""

    name: str
    remote: bool  # True: ``fn`` runs on other machines, so it gets a task spec and no repository of ours

    def start(self) -> None:
        """Be ready to run (connect to the cluster): called before anything is written."""
        ...

    def width(self) -> int:
        """How many items run at once (threads; the cluster's CPUs): what work is cut to."""
        ...

    def map(self, fn: Callable[[T], R], items: Sequence[T], on_result: Callable[[R], None] | None = None,
            on_error: Callable[[BaseException], None] | None = None) -> list[R]:
        """Each result goes to ``on_result`` as it arrives (in this thread). The first failure goes to
        ``on_error``, no further item starts, and it is raised once the running ones are done."""
        ...


def make(kind: str, *, jobs: int = 1, address: str | None = None) -> Executor:
    """The executor ``kind`` names; for ``ray``, Ray must import (else one line naming the extra, exit 2)."""
    if kind == "local":
        from .local import LocalExecutor

        if address is not None:
            raise UsageError("--ray-address needs --executor ray")
        return LocalExecutor(jobs)
    if kind == "ray":
        from .ray_cluster import RayExecutor

        return RayExecutor(address)
    raise UsageError(f"--executor must be one of {', '.join(KINDS)}, not '{kind}'")


def chunks(items: Sequence[T], width: int, most: int) -> list[tuple[T, ...]]:
    """``items`` cut into chunks, one cluster task each: about two chunks per CPU of the cluster
    (``width``), so the CPUs stay busy to the end, at most ``most`` items a chunk (each chunk is
    one push: fewer, larger chunks push less; smaller ones lose less to a dead worker)."""
    size = max(1, min(most, math.ceil(len(items) / (2 * max(1, width)))))
    return [tuple(items[i:i + size]) for i in range(0, len(items), size)]
