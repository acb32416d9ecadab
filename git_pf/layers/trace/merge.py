"""The trace layer merger: ``trace/messages.jsonl`` plus the recorded exchanges under ``trace/tape/``.

Messages: one side unchanged takes the other; when the ancestor's messages
are a prefix of both, the result is ours followed by one merge message
carrying the other branch's outcome (``summary``). A side that merged the
ancestor in earlier holds a summary of it, so there the ancestor is the
image on that side's first-parent line that brought it in. Anything else (a
side rewrote history) is a conflict. With several merge bases the ancestor
is the longest prefix the bases share. The tape merges path-wise. Sets
``ctx.merged_messages`` for later layers (the cache keeps pages that prefix
it). Writes blobs only.
"""
from __future__ import annotations

from ...image import manifest as img, layercheck
from . import messages as trace_fmt
from ...core.sequences import common_prefix
from ...merge.layer import LayerResult, MergeContext
from .summary import merge_message, summarize
from ...merge.tree3 import base_entry, blob, entry, merge_paths, pick


def _messages(git, image) -> list[dict]:
    return layercheck.load(git, image, img.TRACE_MESSAGES, []) if image is not None else []


def _incorporation(git, image, bases: list) -> str | None:
    """The oldest image on ``image``'s first-parent line that already contains every base
    (the base itself, or the merge that brought it in); None without bases."""
    if not bases:
        return None
    found, oid = None, image.id
    while oid is not None and all(oid == b.id or git.descendant_of(oid, b.id) for b in bases):
        found = oid
        parents = git[oid].parent_ids
        oid = str(parents[0]) if parents else None
    return found


def _needs_messages(ctx: MergeContext) -> bool:
    return any(entry(ctx.repo.git, i, b"cache") is not None for i in (ctx.ours, ctx.theirs))


class TraceMerger:
    name = "trace"

    def merge(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        skip = lambda p: p == img.TRACE_MESSAGES  # noqa: E731
        changes, tape_conflicts = merge_paths(git, ctx.bases, ctx.ours, ctx.theirs, skip, b"trace")
        result = self._messages(ctx)
        result.changes.update(changes)
        result.conflicts += [f"CONFLICT (trace): '{p.decode('utf-8', 'replace')}' changed differently on both sides"
                             for p in tape_conflicts]
        result.clean = not result.conflicts
        if changes or tape_conflicts:
            result.report["tape_paths_from_theirs"] = len(changes)
        return result

    def _messages(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        b = base_entry(git, ctx.bases, img.TRACE_MESSAGES)
        o, t = entry(git, ctx.ours, img.TRACE_MESSAGES), entry(git, ctx.theirs, img.TRACE_MESSAGES)
        choice = pick(b, o, t)
        if choice in ("unchanged", "same", "ours"):
            if _needs_messages(ctx):
                ctx.merged_messages = _messages(git, ctx.ours)
            return LayerResult("trace", True, report={"resolution": choice, "prefill_tokens": 0},
                               trailer=f"trace {choice}")
        ours, theirs = _messages(git, ctx.ours), _messages(git, ctx.theirs)
        if choice == "theirs":
            return self._result(ctx, "theirs", theirs, ours, {img.TRACE_MESSAGES: t})
        bases = [_messages(git, i) for i in ctx.bases]
        base = bases[0][: min((common_prefix(bases[0], x) for x in bases), default=0)] if bases else []
        if theirs == base:
            ctx.merged_messages = ours
            return LayerResult("trace", True, report={"resolution": "ours", "prefill_tokens": 0}, trailer="trace ours")
        if ours == base:
            return self._result(ctx, "theirs", theirs, ours, {img.TRACE_MESSAGES: t})
        if trace_fmt.is_prefix(base, ours) and trace_fmt.is_prefix(base, theirs):
            return self._append(ctx, ours, theirs[len(base):])
        # a side that merged the ancestor in earlier holds a summary of it, not its messages:
        # there the ancestor is represented by the image on that side's line that brought it in
        starts = {side: _incorporation(git, image, ctx.bases) for side, image in (("ours", ctx.ours), ("theirs", ctx.theirs))}
        prefixes = {side: _messages(git, img.read_image(git, oid)) if oid else base for side, oid in starts.items()}
        rewritten = [side for side, msgs in (("ours", ours), ("theirs", theirs))
                     if not trace_fmt.is_prefix(prefixes[side], msgs)]
        if rewritten:
            line = (f"CONFLICT (trace): the ancestor's messages are not a prefix of "
                    f"{' and '.join(rewritten)} (history rewritten)")
            ctx.merged_messages = ours
            return LayerResult("trace", False, report={"resolution": "conflict", "rewritten": rewritten},
                               conflicts=[line], trailer="trace conflict")
        return self._append(ctx, ours, theirs[len(prefixes["theirs"]):])

    def _append(self, ctx: MergeContext, ours: list[dict], new: list[dict]) -> LayerResult:
        git = ctx.repo.git
        if not new:
            ctx.merged_messages = ours
            return LayerResult("trace", True, report={"resolution": "ours", "prefill_tokens": 0}, trailer="trace ours")
        text, how = summarize(git, new, ctx.theirs_name, ctx.dry_run)
        merged = ours + [merge_message(text, ctx.theirs_name, ctx.theirs.id, len(new))]
        result = self._result(ctx, "summary", merged, ours, {img.TRACE_MESSAGES: blob(git, trace_fmt.encode(merged))})
        result.report.update(summarized_messages=len(new), summarized_tokens=trace_fmt.estimate_tokens(new),
                             summarizer=how)
        result.trailer = f"trace summary messages={len(new)} tokens={trace_fmt.estimate_tokens(new)}"
        return result

    def _result(self, ctx, resolution: str, merged: list[dict], ours: list[dict], changes: dict) -> LayerResult:
        ctx.merged_messages = merged
        prefill = trace_fmt.estimate_tokens(merged[common_prefix(ours, merged):])
        summary = {"messages": len(merged), "tokens_estimate": trace_fmt.estimate_tokens(merged)}
        report = {"resolution": resolution, "messages": len(merged), "prefill_tokens": prefill}
        return LayerResult("trace", True, changes, summary, report, trailer=f"trace {resolution}")
