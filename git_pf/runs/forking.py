"""Forking a recorded run at a step: a branch whose steps 1..N-1 are the run's own commits and
whose step N holds a changed response (docs/record.md, "Step images").

The new step N's tree is the original step N's (so its world is the sandbox
as it was when request N was sent) with tape entry N replaced and the trace
messages recomputed from it; its parent is the original step N-1 image.
``reply_from_editor`` lets a user write the new reply in their editor.
Writes one commit and creates one branch (or sets one full ref: a blame trial's).
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import tempfile
from typing import Callable

from ..core import canonjson, config
from ..image import manifest as img, refs, signing, verify
from ..core.errors import DataError, UsageError
from ..ops.fork import _next_index
from ..layers.trace import messages as trace, tape as tape_mod
from .llm import wire
from .steps import FORKED_TRAILER, RUN_END_TRAILER, STEP_TRAILER, at_step, check_target, step_of
from ..store.packfile import packed


def default_name(git, rev: str, n: int) -> str:
    """``<branch>-step<N>-<k>`` (k after the existing ones); ``run-<id>`` stands for a REV that is no branch."""
    base = refs.current_branch(git) if rev in ("HEAD", "@") else rev
    if not base or refs.branch_tip(git, base) is None:
        base = f"run-{refs.resolve(git, rev)[:8]}"
    prefix = f"{base}-step{n}"
    return refs.check_name(f"{prefix}-{_next_index(refs.list_refs(git, refs.HEADS), prefix)}")


def fork_at_step(repo, rev: str, n: int, *, entry_change: Callable[[dict], dict], name: str | None = None,
                 ref: str | None = None) -> img.ImageInfo:
    """A new branch whose tip is step ``n`` of REV's run with its exchange changed by ``entry_change``;
    with ``ref`` (a full name under ``refs/pf/``) that ref is set instead, replacing where it pointed."""
    git = repo.git
    if n < 1:
        raise UsageError("a fork at a step needs a step of 1 or more (step 0 is the world before the run)")
    source = img.read_image(git, at_step(git, rev, n))
    verify.check_use(git, source.id, rev)
    stored = tape_mod.read(git, source.tree)
    if not any(isinstance(e, dict) and e.get("v") == 2 for e in stored or ()):  # e.g. an agent's own hooks' branch
        raise UsageError(f"'{rev}' is not a recorded run (step {n} has no tape of format v2): "
                         f"fork at a step needs a run made by 'git pf record'")
    parent = source.parents[0] if source.parents else None
    if parent is None or step_of(img.read_image(git, parent)) != n - 1:
        raise DataError(f"image {source.short} (step {n}) does not follow step {n - 1}")
    if ref is not None:
        ref = check_target(ref)
    else:
        name = refs.check_name(name) if name else default_name(git, rev, n)
        if refs.branch_tip(git, name) is not None:
            raise UsageError(f"branch '{name}' already exists")
    at = [i for i, e in enumerate(stored) if e.get("v") == 2 and e.get("kind") == "exchange" and e.get("step") == n]
    if len(at) != 1:
        raise DataError(f"image {source.short}: its tape holds no single exchange of step {n}")
    original = stored[at[0]]
    changed = dict(entry_change(dict(original)), step=n, arrival=original.get("arrival"),
                   batch=original.get("batch"), draws=original.get("draws", []))
    stored[at[0]] = changed
    tape = tape_mod.TapeInput(stored)
    messages = wire.messages(json.loads(tape.entries[at[0]][1])) or trace.decode(
        img.read_file(git, source.tree, img.TRACE_MESSAGES) or b"")

    kept = [(k, v) for k, v in source.trailers if k not in (STEP_TRAILER, RUN_END_TRAILER, FORKED_TRAILER, "Pf-Fork")]
    message = img.format_message(f"step {n}: fork of {source.short}",
                                 kept + [(STEP_TRAILER, str(n)), (FORKED_TRAILER, source.id)])
    sig = config.signature(git)
    with packed(git):  # the fork's objects in one pack before its ref moves: no loose object (docs/format.md)
        edit = img.TreeEdit(git, source.tree)
        layers = dict(source.manifest.get("layers", {}), tape=tape.write(repo, edit, source))
        edit.put_file(img.TRACE_MESSAGES, trace.encode(messages))
        layers["trace"] = dict(layers.get("trace") or {}, messages=len(messages),
                               tokens_estimate=trace.estimate_tokens(messages))
        edit.put_file(img.MANIFEST, canonjson.encode(dict(source.manifest, layers=layers)))
        commit = signing.write_commit(git, sig, sig, message, edit.write(), [parent])
    if ref is not None:
        refs.update_ref(git, ref, commit, refs.ref_tip(git, ref), f"pf fork: step {n} of {source.short}")
    else:
        refs.update_branch(git, name, commit, None, f"pf fork: step {n} of {source.short}")
    return img.read_image(git, commit)


def reply_from_editor(repo, entry: dict) -> dict:
    """``entry`` with the reply the user writes in their editor (``git var GIT_EDITOR``), starting from the recorded one."""
    try:
        editor = subprocess.run(["git", "var", "GIT_EDITOR"], cwd=repo.git_dir, capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        raise UsageError("no editor: set GIT_EDITOR or EDITOR, or give --response FILE") from None
    fd, path = tempfile.mkstemp(prefix="PF_REPLY-", suffix=".txt", dir=repo.git_dir / "pf")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(wire.reply_text(entry))
        if subprocess.run(["sh", "-c", f'{editor} "$@"', editor, path]).returncode != 0:
            raise UsageError(f"the editor ({shlex.quote(editor)}) failed; the fork was not made")
        with open(path, "rb") as f:
            text = f.read()
    finally:
        os.unlink(path)
    try:
        return wire.with_reply(entry, text.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError("the edited reply is not UTF-8 text") from None
