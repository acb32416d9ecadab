"""Comparing two images layer by layer.

World: files added / changed / removed (plus attribute-only changes);
trace: messages appended, or whether the history was rewritten, and
recorded exchanges added / removed; effects:
entries added and removed (by entry hash); env: keys added / changed /
removed; any other layer path that differs is listed by name. Every layer
file is parsed by its reader (``layercheck``), so a malformed one is a
``DataError`` naming the image. With ``patch=True`` the world's files also
get their unified diff, as git prints it (``worldpatch``). Read-only.
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

import pygit2

from . import image as img, worldpatch
from .layers.effects import ledger as effects_mod
from .layers.trace import tape
from .layers.trace import messages as trace
from .gittree import diff_trees
from .errors import DataError
from .layercheck import load
from .layers.world.env import Env
from .layers.world.names import real_path

_KNOWN = {img.MANIFEST, img.WORLD_ATTRS, img.WORLD_ENV, img.TRACE_MESSAGES, img.EFFECTS_LEDGER}


@dataclass
class WorldDiff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    attrs_changed: list[str] = field(default_factory=list)


@dataclass
class TraceDiff:
    before: int = 0
    after: int = 0
    appended: int = 0
    rewritten: bool = False  # True when A's messages are not a prefix of B's
    exchanges_added: int = 0  # recorded LLM exchanges (trace/tape/) only in B
    exchanges_removed: int = 0  # ... only in A


@dataclass
class EffectsDiff:
    added: int = 0
    removed: int = 0


@dataclass
class EnvDiff:
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)


@dataclass
class ImageDiff:
    a: str
    b: str
    world: WorldDiff
    trace: TraceDiff
    effects: EffectsDiff
    env: EnvDiff
    other: list[str]
    patches: list[tuple[bytes, bytes]] | None = None  # (real path, unified diff) per world file, with -p

    def to_json(self) -> dict:
        out = asdict(self)
        del out["patches"]
        if self.patches is not None:
            out["world"]["patches"] = [{"path": os.fsdecode(p), "patch": t.decode("utf-8", "replace")}
                                       for p, t in self.patches]
        return out

    @property
    def patch(self) -> bytes:
        """Every world file's unified diff, concatenated: what ``git diff`` would print."""
        return b"".join(t for _, t in self.patches or [])

    @property
    def empty(self) -> bool:
        w, e = self.world, self.env
        return not (w.added or w.changed or w.removed or w.attrs_changed or self.trace.appended
                    or self.trace.rewritten or self.effects.added or self.effects.removed
                    or e.added or e.changed or e.removed or self.other)


def _world(git, a: img.ImageInfo, b: img.ImageInfo, aa: dict, ab: dict) -> WorldDiff:
    out = WorldDiff()
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    for path, old, new in diff_trees(git, bytes.fromhex(ta) if ta else None, bytes.fromhex(tb) if tb else None):
        bucket = out.added if old is None else out.removed if new is None else out.changed
        bucket.append(os.fsdecode(real_path(path)))
    touched = set(out.added) | set(out.changed) | set(out.removed)
    for p in sorted(aa.keys() | ab.keys()):
        ja, jb = (x[p].to_json() if p in x else None for x in (aa, ab))
        if ja != jb and os.fsdecode(p) not in touched:
            out.attrs_changed.append(os.fsdecode(p))
    return out


def _trace(git, a, b) -> TraceDiff:
    ma, mb = (load(git, x, img.TRACE_MESSAGES, []) for x in (a, b))
    prefix = trace.is_prefix(ma, mb)
    ta, tb = set(tape.entries(git, a.tree)), set(tape.entries(git, b.tree))
    return TraceDiff(len(ma), len(mb), len(mb) - len(ma) if prefix else 0, not prefix, len(tb - ta), len(ta - tb))


def _effects(git, a, b) -> EffectsDiff:
    ea, eb = ({effects_mod.entry_hash(e) for e in load(git, x, img.EFFECTS_LEDGER, [])} for x in (a, b))
    return EffectsDiff(len(eb - ea), len(ea - eb))


def _env(git, a, b) -> EnvDiff:
    va, vb = (load(git, x, img.WORLD_ENV, Env()).vars for x in (a, b))
    return EnvDiff(sorted(vb.keys() - va.keys()), sorted(k for k in va.keys() & vb.keys() if va[k] != vb[k]),
                   sorted(va.keys() - vb.keys()))


def _other(git, a, b) -> list[str]:
    out = set()
    for path, _, _ in diff_trees(git, bytes.fromhex(a.tree), bytes.fromhex(b.tree)):
        if path.startswith((img.WORLD_FS + b"/", img.TRACE_TAPE + b"/")) or path in _KNOWN:
            continue
        out.add(os.fsdecode(path))
    return sorted(out)


def _patches(git, store, a: img.ImageInfo, b: img.ImageInfo, aa: dict, ab: dict) -> list[tuple[bytes, bytes]]:
    pa, pb = ({p for p, e in x.items() if e.pointer} for x in (aa, ab))
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    try:
        return worldpatch.patches(git, store, ta, tb, pa, pb)
    except DataError as e:
        raise DataError(f"images {a.short}..{b.short}: {e.message}", e.code) from None


def diff(git: pygit2.Repository, a: img.ImageInfo, b: img.ImageInfo, store=None) -> ImageDiff:
    """Compare ``a`` with ``b``; with a side ``store``, also each world file's unified diff."""
    for image in (a, b):  # the process table is listed under "other" when it changed, but must parse
        load(git, image, img.WORLD_PROCS)
    aa, ab = (load(git, x, img.WORLD_ATTRS, {}) for x in (a, b))
    return ImageDiff(a.id, b.id, _world(git, a, b, aa, ab), _trace(git, a, b), _effects(git, a, b), _env(git, a, b),
                     _other(git, a, b), _patches(git, store, a, b, aa, ab) if store is not None else None)
