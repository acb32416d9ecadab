"""Merging the KV layer: keep the pages still valid for the merged trace, drop the rest.

Rule (docs/cache.md §Merge): an image's cache holds a prefix of the tokens
of that image's own trace. Of ours, theirs and the base, the images whose
trace is a prefix of the merged trace (``ctx.merged_messages``) have caches
that are still a prefix of the merged context; the one with the most cached
tokens is kept whole (ties: ours, then theirs, then the base), every other
page is dropped. The report says what was kept and dropped and estimates
the tokens to re-prefill. Never a conflict. No torch; writes no refs, only
reuses an existing ``pages.json`` blob.
"""
from __future__ import annotations

from ...image import manifest as img
from ..trace import messages as trace
from ...image.tree import lookup
from ...merge.layer import LayerResult, MergeContext
from .table import PATH, PageTable, read

SIDES = ("ours", "theirs", "base")


def _messages(repo, image: img.ImageInfo) -> list[dict]:
    return trace.decode(img.read_file(repo.git, image.tree, img.TRACE_MESSAGES) or b"")


def _pick(ctx: MergeContext, tables: dict, merged: list[dict]) -> tuple[str | None, list[dict]]:
    """The side whose cache to keep and that side's messages."""
    best, best_msgs, best_tokens = None, [], -1
    for side in SIDES:
        image, table = getattr(ctx, side), tables.get(side)
        if image is None or table is None:
            continue
        msgs = _messages(ctx.repo, image)
        if trace.is_prefix(msgs, merged) and len(table.tokens) > best_tokens:
            best, best_msgs, best_tokens = side, msgs, len(table.tokens)
    return best, best_msgs


def _dropped(tables: dict, kept: PageTable | None) -> tuple[int, int]:
    """Distinct pages (and their tokens) of ours / theirs that the merge does not keep."""
    keep = {p.id for p in kept.pages} if kept else set()
    gone: dict[str, int] = {}
    for side in ("ours", "theirs"):
        table = tables.get(side)
        if table is None:
            continue
        for (a, b), page in zip(table.spans(), table.pages):
            if page.id not in keep:
                gone[page.id] = b - a
    return len(gone), sum(gone.values())


class CacheMerger:
    name = "cache"

    def merge(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        tables = {side: read(ctx.repo, getattr(ctx, side).tree) for side in SIDES if getattr(ctx, side) is not None}
        if all(t is None for t in tables.values()):
            return LayerResult(self.name, True, report={"kept_from": None, "kept_tokens": 0, "kept_pages": 0,
                                                        "dropped_pages": 0, "dropped_tokens": 0,
                                                        "reprefill_tokens_estimate": 0})
        merged = ctx.merged_messages if ctx.merged_messages is not None else _messages(ctx.repo, ctx.ours)
        side, side_msgs = _pick(ctx, tables, merged)
        kept = tables[side] if side else None
        dropped_pages, dropped_tokens = _dropped(tables, kept)
        if kept is not None:
            found = lookup(git, bytes.fromhex(getattr(ctx, side).tree), PATH)
            changes = {PATH: (found[0], found[1])}
            summary = kept.summary()
        else:
            changes = {PATH: None}
            summary = {"tokens": 0, "pages": 0, "bytes": 0}
        report = {
            "kept_from": side,
            "kept_tokens": len(kept.tokens) if kept else 0,
            "kept_pages": len(kept.pages) if kept else 0,
            "dropped_pages": dropped_pages,
            "dropped_tokens": dropped_tokens,
            "reprefill_tokens_estimate": trace.estimate_tokens(merged[len(side_msgs):]) if merged[len(side_msgs):] else 0,
        }
        trailer = f"cache kept {report['kept_pages']} pages from {side}, dropped {dropped_pages}" if side else \
            f"cache dropped {dropped_pages} pages"
        return LayerResult(self.name, True, changes, summary, report, [], trailer)
