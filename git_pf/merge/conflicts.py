"""Resolving a conflicted world by hand: ``--checkout DIR``, ``--continue DIR``, ``--abort DIR``.

``--checkout`` writes the merged world into DIR (absent or empty) with
diff3-style markers (ours, base, theirs) in conflicted text files; for a
conflicted binary file or large (side-store) file, ours stays at the path
and theirs is written beside it as ``PATH~theirs``. The conflict list goes
to ``DIR/.pf/merge-conflicts.txt`` (never captured) and the merge's state to
``$GIT_DIR/pf/merge/<key>.json``. ``--continue`` refuses while markers or
``~theirs`` files remain, then captures DIR as the merged world and writes
the merge image; ``--abort`` removes DIR and the state. Other layers must be
clean (or resolved with ``--prefer``) to check out. The world is checked by
``safepath.validate_world`` before anything is written, and written through
``safepath.SafeDir``.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from .. import config, image as img, refs, safepath, siblings
from ..errors import EXIT_NEGATIVE, DataError, PfError, UsageError
from ..gittree import MODE_TREE, TreeWriter, blob_size, edit, lookup, over_limit, read_blob
from ..layers.world import attrs as attrs_mod
from ..layers.world.capture import capture
from ..layers.world.restore import restore
from ..layers.world.statcache import StatCache
from . import engine
from ..layers.world import gitmerge
from .layer import LayerResult
from ..layers.world.merge import real_path, tree_path

STATE_VERSION = 1
CONFLICT_LIST = Path(".pf") / "merge-conflicts.txt"
SIDE_KINDS = ("binary", "pointer")
_MARKER = re.compile(rb"^(<{7}|>{7})( |$)", re.M)
_BASE_LABEL = re.compile(rb"^\|{7} .*$", re.M)


def _state_file(repo, dest: Path) -> Path:
    key = hashlib.sha256(os.fsencode(os.path.realpath(dest))).hexdigest()[:24]
    return repo.git_dir / "pf" / "merge" / f"{key}.json"


def _load(repo, dest: Path) -> dict:
    path = _state_file(repo, dest)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no merge in progress in '{dest}'") from None
    except ValueError:
        raise PfError(f"merge state for '{dest}' is damaged ({path}); use --abort") from None


def _check_dest(dest: Path) -> None:
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"'{dest}' exists and is not a directory", param="checkout")
    if dest.exists() and any(os.scandir(dest)):
        raise UsageError(f"'{dest}' is not empty", param="checkout")
    if not dest.parent.is_dir():
        raise UsageError(f"parent directory of '{dest}' does not exist", param="checkout")


def merge_with_checkout(repo, req: engine.MergeRequest, dest: Path) -> engine.MergeResult:
    dest = Path(os.path.abspath(dest))
    if req.dry_run:
        raise UsageError("--checkout cannot be combined with --dry-run")
    _check_dest(dest)
    if _state_file(repo, dest).exists():
        raise UsageError(f"a merge is already in progress in '{dest}' (--continue or --abort it)")
    result = engine.merge(repo, req)
    world = next((r for r in result.layers if r.layer == "world"), None)
    if result.status != "conflict" or world is None or world.clean:
        return result
    if any(not r.clean for r in result.layers if r.layer != "world"):
        return result  # other layers need --prefer first; the report says which
    conflicts = world.report["conflicts"]
    tree, attrs, markers, companions = _conflicted_world(repo, result, world)
    _write_dir(repo, dest, tree, attrs, conflicts)
    state = {"version": STATE_VERSION, "dir": str(dest), "branch": result.branch, "ours": result.ours.id,
             "theirs": result.theirs.id, "theirs_rev": result.theirs_name, "prefer": engine.parse_prefer(req.prefer),
             "options": req.options, "accept_duplicate_effects": req.accept_duplicate_effects,
             "allow_unrelated": req.allow_unrelated, "conflicts": conflicts,
             "markers": [os.fsdecode(p) for p in markers], "companions": [os.fsdecode(p) for p in companions]}
    state_file = _state_file(repo, dest)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, indent=1, sort_keys=True))
    result.checkout = str(dest)
    return result


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


def continue_merge(repo, dest: Path) -> engine.MergeResult:
    dest = Path(os.path.abspath(dest))
    state = _load(repo, dest)
    if not dest.is_dir():
        raise UsageError(f"'{dest}' is gone; use 'git pf merge --abort {dest}'")
    left = unresolved(dest, state)
    if left:
        shown = ", ".join(left[:5]) + (f" and {len(left) - 5} more" if len(left) > 5 else "")
        raise PfError(f"unresolved conflicts remain in {len(left)} path{'s' if len(left) != 1 else ''}: {shown}",
                      EXIT_NEGATIVE)
    git = repo.git
    if refs.branch_tip(git, state["branch"]) != state["ours"]:
        raise PfError(f"branch '{state['branch']}' moved since the merge started; "
                      f"use --abort and merge again")
    req = engine.MergeRequest(state["theirs"], state["branch"], False, state["prefer"], state["options"],
                              state["accept_duplicate_effects"], True, state["allow_unrelated"])
    ctx = engine.start(repo, req)
    ctx.theirs_name = state["theirs_rev"]
    results = [_captured_world(repo, dest)] + engine.run_layers(ctx, engine.parse_prefer(state["prefer"]), ("world",))
    result = engine.MergeResult("merged", ctx.ours_name, ctx.ours, ctx.theirs, state["theirs_rev"],
                                [b.id for b in ctx.bases], results, context=ctx)
    if not all(r.clean for r in results):
        result.status = "conflict"
        return result
    result.image = engine.write_image(ctx, results, engine.build_tree(ctx, results))
    _state_file(repo, dest).unlink()
    try:
        (dest / CONFLICT_LIST).unlink()
        (dest / CONFLICT_LIST).parent.rmdir()
    except OSError:
        pass
    return result


def _captured_world(repo, dest: Path) -> LayerResult:
    git = repo.git
    cache = StatCache(Path(os.devnull), ())
    cap = capture(git, repo.store, os.fsencode(os.path.realpath(dest)), threshold=config.large_file_threshold(git),
                  ignore=[], cache=cache, exclude={os.fsencode(os.path.realpath(repo.git_dir))})
    writer = TreeWriter(git)
    changes = {img.WORLD_FS: (MODE_TREE, bytes.fromhex(cap.tree)),
               img.WORLD_ATTRS: (0o100644, writer.write_blob(attrs_mod.encode(cap.attrs)))}
    summary = {"files": cap.stats.files, "bytes": cap.stats.bytes, "pointers": cap.stats.pointers}
    return LayerResult("world", True, changes, summary, {"resolution": "resolved by hand", "path": str(dest)},
                       trailer="world resolved-by-hand")


def abort(repo, dest: Path) -> Path:
    dest = Path(os.path.abspath(dest))
    _load(repo, dest)
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    _state_file(repo, dest).unlink()
    return dest
