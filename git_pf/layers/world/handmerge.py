"""Resolving a conflicted world by hand (``git pf merge --checkout/--continue``), the world's part.

``checkout`` writes the merged world into a directory with diff3-style markers (ours,
base, theirs) in conflicted text files; for a conflicted binary file or large
(side-store) file, ours stays at the path and theirs is written beside it as
``PATH~theirs``. The conflict list goes to ``DIR/.pf/merge-conflicts.txt`` (never
captured). ``unresolved`` lists the paths still holding markers or ``~theirs`` files;
``captured`` takes the directory as the merged world; ``done`` removes the conflict
list. The world is checked by ``safepath.validate_world`` before anything is written,
and written through ``safepath.SafeDir``. The merge state and the engine are the
caller's (``git_pf.merge.conflicts``).
"""
from __future__ import annotations

import dataclasses
import os
import re
from pathlib import Path

from ...core import config, siblings
from ...image import manifest as img, safepath
from ...core.errors import DataError
from ...image.tree import MODE_TREE, TreeWriter, blob_size, edit, lookup, over_limit, read_blob
from ...merge.layer import LayerResult
from . import attrs as attrs_mod, gitmerge
from .capture import capture
from .merge import real_path, tree_path
from .restore import restore
from .snapshot_input import fs_summary
from .statcache import StatCache

CONFLICT_LIST = Path(".pf") / "merge-conflicts.txt"
SIDE_KINDS = ("binary", "pointer")
_MARKER = re.compile(rb"^(<{7}|>{7})( |$)", re.M)
_BASE_LABEL = re.compile(rb"^\|{7} .*$", re.M)


def checkout(repo, result, world: LayerResult, dest: Path) -> dict:
    """Write the conflicted world into ``dest`` (absent or empty); the state to keep:
    its conflicts, the text paths holding markers and the ``~theirs`` companions."""
    conflicts = world.report["conflicts"]
    tree, attrs, markers, companions = _conflicted_world(repo, result, world)
    _write_dir(repo, dest, tree, attrs, conflicts)
    return {"conflicts": conflicts, "markers": [os.fsdecode(p) for p in markers],
            "companions": [os.fsdecode(p) for p in companions]}


def _conflicted_world(repo, result, world: LayerResult):
    """The diff3 tree, its attrs, text paths holding markers, and ``~theirs`` companions."""
    git, d = repo.git, world.detail
    tm = gitmerge.merge_tree(repo.git_dir, d["ours"], d["theirs"], unrelated=d["unrelated"], diff3=True)
    attrs = dict(d["attrs"])
    by_path: dict[bytes, dict[int, gitmerge.Stage]] = {}
    for s in tm.stages:
        by_path.setdefault(s.path, {})[s.stage] = s
    side_paths = {tree_path(os.fsencode(c["path"])) for c in world.report["conflicts"]
                  if c["kind"] in SIDE_KINDS and c["path"] is not None}
    changes, markers, companions = {}, [], []
    ours_label = f"ours ({result.branch})".encode()
    theirs_label = f"theirs ({result.theirs_name})".encode()
    for path, stages in sorted(by_path.items()):
        real = real_path(path)
        if path in side_paths and 2 in stages and 3 in stages:
            for name, stage in ((real, stages[2]), (real + b"~theirs", stages[3])):
                changes[tree_path(name)] = (stage.mode, bytes.fromhex(stage.oid))
                entry = attrs.get(name) or attrs_mod.PathAttrs(name)
                attrs[name] = dataclasses.replace(entry, pointer=bytes.fromhex(stage.oid) in d["pointer_oids"])
            companions.append(real + b"~theirs")
            continue
        found = lookup(git, bytes.fromhex(tm.tree), path)
        if found is None or found[0] == MODE_TREE or over_limit(blob_size(git, found[1])):
            continue  # one too large to read keeps git's labels (git merges one over 512 MiB as binary)
        data = read_blob(git, found[1])
        if not _MARKER.search(data):
            continue
        data = data.replace(b"<<<<<<< " + d["ours"].encode(), b"<<<<<<< " + ours_label)
        data = data.replace(b">>>>>>> " + d["theirs"].encode(), b">>>>>>> " + theirs_label)
        data = _BASE_LABEL.sub(b"||||||| base", data)
        changes[path] = (found[0], TreeWriter(git).write_blob(data))
        markers.append(real)
    tree = edit(TreeWriter(git), git, bytes.fromhex(tm.tree), changes).hex()
    return tree, attrs, markers, companions


def _write_dir(repo, dest: Path, tree: str, attrs: dict, conflicts: list[dict]) -> None:
    world = safepath.validate_world(repo.git, tree, attrs)  # before anything is written
    side = CONFLICT_LIST.parts[0]
    if os.fsencode(side) in world.kinds:
        raise DataError(f"world/fs: '{side}' is where --checkout writes {CONFLICT_LIST}")
    siblings.remove_leftovers(dest, repo.git_dir)
    tmp = siblings.make(dest, "merge", repo.git_dir)
    try:
        restore(repo.git, repo.store, world, os.fsencode(tmp))
        with safepath.SafeDir(os.fsencode(tmp)) as out:
            out.write_bytes(os.fsencode(CONFLICT_LIST), "".join(f"{c['message']}\n" for c in conflicts).encode())
        if dest.exists():
            os.rmdir(dest)
        os.rename(tmp, dest)
    finally:
        siblings.drop(tmp, repo.git_dir)


def unresolved(dest: Path, state: dict) -> list[str]:
    """Paths that still hold conflict markers, and ``~theirs`` files not yet removed."""
    left = []
    for rel in state["markers"]:
        try:
            data = (dest / rel).read_bytes()
        except (FileNotFoundError, IsADirectoryError):
            continue
        if _MARKER.search(data):
            left.append(rel)
    left += [rel for rel in state["companions"] if os.path.lexists(dest / rel)]
    return left


def captured(repo, dest: Path) -> LayerResult:
    """The world as resolved in ``dest``, captured."""
    git = repo.git
    cache = StatCache(Path(os.devnull), ())
    cap = capture(git, repo.store, os.fsencode(os.path.realpath(dest)), threshold=config.large_file_threshold(git),
                  ignore=[], cache=cache, exclude={os.fsencode(os.path.realpath(repo.git_dir))})
    writer = TreeWriter(git)
    changes = {img.WORLD_FS: (MODE_TREE, bytes.fromhex(cap.tree)),
               img.WORLD_ATTRS: (0o100644, writer.write_blob(attrs_mod.encode(cap.attrs)))}
    return LayerResult("world", True, changes, fs_summary(cap.stats), {"resolution": "resolved by hand", "path": str(dest)},
                       trailer="world resolved-by-hand")


def done(dest: Path) -> None:
    """Remove the conflict list (and ``.pf/`` when that leaves it empty)."""
    try:
        (dest / CONFLICT_LIST).unlink()
        (dest / CONFLICT_LIST).parent.rmdir()
    except OSError:
        pass
