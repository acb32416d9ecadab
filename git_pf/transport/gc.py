"""``git pf gc``: remove side-store objects no image reaches.

Roots are every ref under ``refs/pf/`` (branches, tags, ``HEAD``,
remote-tracking branches) except objects indexes, plus the image of every
running mount (``$GIT_DIR/pf/mounts/<id>/mount.json`` whose pid is alive).
An object is removed only when unreached *and* older than the prune date
(default ``gc.pruneExpire``, else two weeks, as git), so objects an
in-flight snapshot has written but not yet referenced survive. When a
chunk index cannot be read, no object is removed. Temp files in the side
store's ``tmp/`` are removed when the process named in them is gone
(docs/sidestore.md), whatever their age. Sound-tree marks of trees no
longer in the repository are dropped (``safepath``). Removes side-store files;
objects held as git blobs (listed by this repository's ``refs/pf/objects``)
are unlisted there, and git's gc prunes their blobs.
"""
from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from ..core import config, siblings
from ..image import refs as refs_mod, safepath
from ..store import sidestore
from ..core.errors import UsageError
from ..core.liveness import may_have_written, pid_alive
from . import gitcmd, reach

DEFAULT_PRUNE = "2.weeks.ago"


@dataclass
class GcResult:
    images: int = 0
    kept: int = 0
    removed: list[str] = field(default_factory=list)
    removed_bytes: int = 0
    spared_recent: int = 0
    unknown_indexes: list[str] = field(default_factory=list)
    dry_run: bool = False
    temp_removed: int = 0  # temp files of writers that are gone
    temp_bytes: int = 0
    temp_live: int = 0  # temp files of writers still running, kept

    def to_json(self) -> dict:
        return {"images": self.images, "kept": self.kept, "removed": self.removed, "removed_bytes": self.removed_bytes,
                "spared_recent": self.spared_recent, "unknown_indexes": self.unknown_indexes, "dry_run": self.dry_run,
                "temp_removed": self.temp_removed, "temp_bytes": self.temp_bytes, "temp_live": self.temp_live}


def root_refs(repo) -> dict[str, str]:
    return {n: o for n, o in refs_mod.list_refs(repo.git, refs_mod.ROOT).items() if refs_mod.is_image_ref(n)}


def mount_images(git_dir) -> list[str]:
    """Images of running mounts (their pid is alive)."""
    out = []
    base = git_dir / "pf" / "mounts"
    if not base.is_dir():
        return out
    for entry in sorted(base.iterdir()):
        try:
            info = json.loads((entry / "mount.json").read_text())
        except (OSError, ValueError):
            continue
        if isinstance(info, dict) and isinstance(info.get("pid"), int) and pid_alive(info["pid"]) and isinstance(info.get("image"), str):
            out.append(info["image"])
    return out


def prune_cutoff(repo, prune: str | None) -> float | None:
    """The epoch before which unreached objects may go; None for 'never'."""
    value = prune or config.get_str(repo.git, "gc.pruneExpire") or DEFAULT_PRUNE
    if value == "never":
        return None
    if value == "now":
        return time.time() + 1
    proc = gitcmd.run(repo.git_dir, ["-c", f"pf.pruneDate={value}", "config", "--type=expiry-date", "pf.pruneDate"],
                      check=False)
    out = proc.stdout.decode().strip()
    if proc.returncode != 0 or not out.isdigit():
        raise UsageError(f"cannot read date '{value}' (try 'now', 'never', '2.weeks.ago', an ISO date)", param="prune")
    epoch = int(out)
    return float(epoch)


def gc(repo, dry_run: bool = False, prune: str | None = None) -> GcResult:
    cutoff = prune_cutoff(repo, prune)
    if not dry_run:  # temporary directories of checkouts that were killed; marks of trees now gone
        siblings.remove_recorded(repo.git_dir)
        safepath.prune_sound_trees(repo.git)
    roots = list(root_refs(repo).values()) + [m for m in mount_images(repo.git_dir) if m in repo.git.odb]
    images = reach.walk_images(repo.git, roots)
    result = GcResult(images=len(images), dry_run=dry_run)
    keep = reach.objects_of(repo.store, reach.reach(repo.git, images), result.unknown_indexes)
    result.kept = sum(1 for o in keep if repo.store.has(o))
    if cutoff is None:
        return result
    _clean_tmp(repo, cutoff, dry_run, result)
    if result.unknown_indexes:
        return result
    held: list[str] = []
    for oid in repo.store.iter_oids():
        if oid in keep:
            continue
        try:
            st = repo.store.path_for(oid).stat()
        except FileNotFoundError:
            held.append(oid)  # a git blob listed by this repository's refs/pf/objects
            continue
        if st.st_mtime >= cutoff:
            result.spared_recent += 1
            continue
        result.removed.append(oid)
        result.removed_bytes += st.st_size
        if not dry_run:
            repo.store.remove(oid)
    _drop_held(repo, held, cutoff, dry_run, result)
    return result


def _drop_held(repo, oids: list[str], cutoff: float, dry_run: bool, result: GcResult) -> None:
    """Unlist unreached objects held as git blobs (git's own gc then prunes the blobs); their
    age is that of the index tip, when objects were last added there."""
    store = repo.store.held
    if not oids or store is None:
        return
    added = store.tip_time()
    if added is None or added >= cutoff:
        result.spared_recent += len(oids)
        return
    result.removed += oids
    result.removed_bytes += sum(store.size(o) or 0 for o in oids)
    if not dry_run:
        store.drop(set(oids))


def _clean_tmp(repo, cutoff: float, dry_run: bool, result: GcResult) -> None:
    """Remove temp files whose writer is gone: the pid in the name (``sidestore.temp_name``) is
    not running, or is running but started after the file was last written (a reused pid).
    A live writer's file is kept, whatever its age. A name that carries no pid goes once older
    than both the prune date and an hour."""
    tmp = repo.store.root / "tmp"
    if not tmp.is_dir():
        return
    for f in tmp.iterdir():
        try:
            st = f.lstat()
            writer = sidestore.temp_writer(f.name)
            if writer is not None and may_have_written(writer, st.st_mtime):
                result.temp_live += 1
                continue
            if writer is None and st.st_mtime >= min(cutoff, time.time() - 3600):
                continue
            if not dry_run:
                f.unlink()
            result.temp_removed += 1
            result.temp_bytes += st.st_size
        except OSError:
            pass

