"""What transport adds to ``git pf fsck``.

Objects indexes (``refs/pf/objects``, ``refs/pf/remotes/<r>/objects``) are
not images: they must decode as objects index v1 instead. A pointer whose
object is not local but is listed by a remote's index is lazily available,
not missing. Reads only.
"""
from __future__ import annotations

from typing import Callable

import pygit2

from ..image import refs as refs_mod
from ..core.errors import PfError
from . import index as idx


def check_indexes(git: pygit2.Repository) -> tuple[list[str], Callable[[str], bool]]:
    """(problems, remote_has) for every objects index ref."""
    problems: list[str] = []
    known: set[str] = set()
    for name, oid in refs_mod.list_refs(git, refs_mod.ROOT).items():
        if not refs_mod.is_index_ref(name) or name.startswith("meta/") or "/meta/" in name:
            continue  # images, and store records (storerecord)
        try:
            known.update(idx.read_index(git, oid))
        except (PfError, KeyError, ValueError) as e:
            problems.append(f"ref refs/pf/{name}: {e}")
    return problems, known.__contains__
