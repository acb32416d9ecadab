"""Listing images: the log of a line of history and the branches and tags.

Read-only walks over commits under ``refs/pf/``.
"""
from __future__ import annotations

from dataclasses import dataclass

import pygit2

from . import manifest as img, refs


@dataclass(frozen=True)
class RefEntry:
    kind: str  # "branch" | "tag"
    name: str
    id: str
    subject: str
    current: bool

    def to_json(self) -> dict:
        return {"kind": self.kind, "name": self.name, "id": self.id, "subject": self.subject, "current": self.current}


def log(git: pygit2.Repository, start: str, limit: int | None = None, first_parent: bool = False) -> list[img.ImageInfo]:
    walker = git.walk(start, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.TIME)
    if first_parent:
        walker.simplify_first_parent()
    out = []
    for commit in walker:
        if limit is not None and len(out) >= limit:
            break
        out.append(img.image_of(git, commit))  # the walk read the commit: only its manifest is read here
    return out


def list_refs(git: pygit2.Repository) -> list[RefEntry]:
    current = refs.current_branch(git)
    out = []
    for kind, prefix in (("branch", refs.HEADS), ("tag", refs.TAGS)):
        for name, oid in refs.list_refs(git, prefix).items():
            commit = git.get(oid)
            subject = commit.message.split("\n", 1)[0] if isinstance(commit, pygit2.Commit) else ""
            out.append(RefEntry(kind, name, oid, subject, kind == "branch" and name == current))
    return out
