"""Resolving a conflicted layer by hand: ``--checkout DIR``, ``--continue DIR``, ``--abort DIR``.

The layer that can be resolved by hand (``Layer.by_hand``: the world) is written into DIR
(absent or empty) with its conflicts marked (``Layer.hand_checkout``: diff3-style markers
in text files, ``PATH~theirs`` beside a conflicted binary or large file, the conflict list
in ``DIR/.pf/merge-conflicts.txt``), and the merge's state goes to
``$GIT_DIR/pf/merge/<key>.json``. ``--continue`` refuses while the layer says something is
unresolved (``Layer.hand_unresolved``), then takes DIR as the merged layer
(``Layer.hand_captured``) and writes the merge image; ``--abort`` removes DIR and the
state. Other layers must be clean (or resolved with ``--prefer``) to check out. No layer
is named here: each is reached through the registry.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

from ..image import refs
from ..ops.checkout import check_dest
from ..core.errors import EXIT_NEGATIVE, PfError, UsageError
from ..layers import registry
from . import engine

STATE_VERSION = 1


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


def _by_hand():
    """The layer a conflict of which can be resolved by hand."""
    return next(layer for layer in registry.layers() if layer.by_hand)


def merge_with_checkout(repo, req: engine.MergeRequest, dest: Path) -> engine.MergeResult:
    dest = Path(os.path.abspath(dest))
    if req.dry_run:
        raise UsageError("--checkout cannot be combined with --dry-run")
    check_dest(dest, "checkout", None)
    if _state_file(repo, dest).exists():
        raise UsageError(f"a merge is already in progress in '{dest}' (--continue or --abort it)")
    result = engine.merge(repo, req)
    hand = _by_hand()
    found = next((r for r in result.layers if r.layer == hand.name), None)
    if result.status != "conflict" or found is None or found.clean:
        return result
    if any(not r.clean for r in result.layers if r.layer != hand.name):
        return result  # other layers need --prefer first; the report says which
    written = hand.hand_checkout(repo, result, found, dest)
    state = {"version": STATE_VERSION, "dir": str(dest), "branch": result.branch, "ours": result.ours.id,
             "theirs": result.theirs.id, "theirs_rev": result.theirs_name, "prefer": engine.parse_prefer(req.prefer),
             "options": req.options, "accept_duplicate_effects": req.accept_duplicate_effects,
             "allow_unrelated": req.allow_unrelated, **written}
    state_file = _state_file(repo, dest)
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text(json.dumps(state, indent=1, sort_keys=True))
    result.checkout = str(dest)
    return result


def unresolved(dest: Path, state: dict) -> list[str]:
    """What the layer resolved by hand still leaves unresolved in ``dest``."""
    return _by_hand().hand_unresolved(dest, state)


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
    hand = _by_hand()
    results = [hand.hand_captured(repo, dest)] + engine.run_layers(ctx, engine.parse_prefer(state["prefer"]), (hand.name,))
    result = engine.MergeResult("merged", ctx.ours_name, ctx.ours, ctx.theirs, state["theirs_rev"],
                                [b.id for b in ctx.bases], results, context=ctx)
    if not all(r.clean for r in results):
        result.status = "conflict"
        return result
    result.image = engine.write_image(ctx, results, engine.build_tree(ctx, results))
    _state_file(repo, dest).unlink()
    hand.hand_done(dest)
    return result


def abort(repo, dest: Path) -> Path:
    dest = Path(os.path.abspath(dest))
    _load(repo, dest)
    if dest.is_dir() and not dest.is_symlink():
        shutil.rmtree(dest)
    _state_file(repo, dest).unlink()
    return dest
