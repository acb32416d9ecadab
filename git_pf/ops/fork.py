"""Forking: N new branches, each one image whose parent is the source image.

A fork's tree is the source's tree (with the label set to the exploration
text when one is given), so every layer tree is shared; fork commits differ
by their ``Pf-Fork`` trailer, so each fork has its own id.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..core import canonjson, config
from ..image import manifest as img, refs, signing, verify
from ..core.errors import UsageError
from ..store.packfile import packed

MAX_FORKS = 100_000


@dataclass(frozen=True)
class Fork:
    name: str
    id: str
    index: int

    def to_json(self) -> dict:
        return {"name": self.name, "id": self.id, "index": self.index}


def _next_index(existing: dict[str, str], prefix: str) -> int:
    pat = re.compile(re.escape(prefix) + r"-(\d+)$")
    used = [int(m.group(1)) for m in (pat.match(n) for n in existing) if m]
    return max(used, default=0) + 1


def default_prefix(git, rev: str, source: img.ImageInfo) -> str:
    """``<branch>-fork`` when REV names a branch (``HEAD`` names the current one), else ``fork-<id>``."""
    if rev in ("HEAD", "@"):
        rev = refs.current_branch(git) or ""
    if rev and "~" not in rev and "^" not in rev and not rev.startswith("refs/"):
        try:
            return refs.check_name(f"{rev}-fork")
        except UsageError:
            pass
    return f"fork-{source.id[:8]}"


def _plan(git, rev: str, n: int, prefix: str | None) -> tuple[img.ImageInfo, str, int]:
    """The source image, the branch prefix and the first index the forks will take."""
    if not 1 <= n <= MAX_FORKS:
        raise UsageError(f"-n must be between 1 and {MAX_FORKS}")
    source = img.read_image(git, refs.resolve(git, rev))
    verify.check_use(git, source.id, rev)
    prefix = refs.check_name(prefix or default_prefix(git, rev, source), "fork prefix")
    return source, prefix, _next_index(refs.list_refs(git, refs.HEADS), prefix)


def planned_names(repo, rev: str, n: int, prefix: str | None = None) -> list[str]:
    """The branch names ``fork`` would give now (so their mount points can be checked first)."""
    _, prefix, start = _plan(repo.git, rev, n, prefix)
    return [_name(prefix, i) for i in range(start, start + n)]


def _name(prefix: str, i: int) -> str:
    return f"{prefix}-{i}"


def fork(repo, rev: str, n: int, prefix: str | None = None, explore: str | None = None) -> list[Fork]:
    git = repo.git
    source, prefix, start = _plan(git, rev, n, prefix)
    tree = source.tree
    sig = config.signature(git)
    subject = f"fork of {source.short}" + (f": {explore}" if explore else "")
    with packed(git):  # every fork's objects in one pack before any branch moves: no loose object (docs/format.md)
        if explore is not None and explore != source.manifest.get("label"):
            manifest = dict(source.manifest, label=explore)
            edit = img.TreeEdit(git, source.tree)
            edit.put_file(img.MANIFEST, canonjson.encode(manifest))
            tree = edit.write()
        commits = [signing.write_commit(git, sig, sig, img.format_message(
            subject, [("Pf-Fork", f"{source.id} {i - start + 1}/{n}")]), tree, [source.id])
            for i in range(start, start + n)]
    forks = []
    for i, commit in zip(range(start, start + n), commits):
        name = _name(prefix, i)
        refs.update_branch(git, name, commit, None, f"pf fork: {subject}")
        forks.append(Fork(name, commit, i))
    return forks
