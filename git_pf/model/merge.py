"""The model layer's three-way merge for ``git pf merge`` (``PLUGINS["model"]``).

Each model part (base.json, adapter, delta) follows the VCS rule first: a
part only one side changed is taken from that side as is (tree ids compared,
no torch). When both sides changed the adapter (or the delta) differently,
the two are merged numerically against the merge base's (zero when it has
none) with the method and options of ``ctx.options`` (``model.*`` keys),
refactored to a LoRA of the asked rank. Both sides changing base.json
differently, one side deleting what the other changed, or adapters over
different base models are conflicts. Writes side-store objects and git
objects only; never refs or commits.
"""
from __future__ import annotations

from ..errors import UsageError
from ..gittree import TreeWriter, edit
from ..merge.layer import LayerResult, MergeContext
from .options import MergeRefused, MergeSpec
from .state import ADAPTER, BASE, DELTA, PARTS, ModelState, part_ids, read_state

WHAT = {BASE: "base.json", ADAPTER: "adapter", DELTA: "delta"}


def resolve_parts(base: dict, ours: dict, theirs: dict) -> tuple[dict, dict, list[bytes], list[str]]:
    """(changes, resolution per part, parts to merge numerically, conflicts) by the VCS rule."""
    changes, resolution, numeric, conflicts = {}, {}, [], []
    for part in PARTS:
        o, t, b = ours[part], theirs[part], base[part]
        if o == t or b == t:
            resolution[WHAT[part]] = "unchanged" if o == b else "ours"
        elif b == o:
            changes[part] = t
            resolution[WHAT[part]] = "theirs"
        elif part == BASE:
            conflicts.append("model: both sides changed the base model differently")
        elif o is None or t is None:
            who = "ours" if o is None else "theirs"
            conflicts.append(f"model: {who} deleted the {WHAT[part]}, the other side changed it")
        else:
            numeric.append(part)
            resolution[WHAT[part]] = "merged"
    return changes, resolution, numeric, conflicts


class ModelMerger:
    name = "model"

    def merge(self, ctx: MergeContext) -> LayerResult:
        spec = MergeSpec.from_options(ctx.options)
        git = ctx.repo.git
        ids = [part_ids(git, image.tree if image else None) for image in (ctx.base, ctx.ours, ctx.theirs)]
        changes, resolution, numeric, conflicts = resolve_parts(*ids)
        report: dict = {"resolution": resolution}
        if conflicts:
            return LayerResult("model", False, report=report, conflicts=conflicts)
        if not numeric and not changes:
            return LayerResult("model", True, report=report)
        trailer = ""
        if numeric:
            base, ours, theirs = (read_state(git, image.tree if image else None)
                                  for image in (ctx.base, ctx.ours, ctx.theirs))
            if ours.base != theirs.base:
                return LayerResult("model", False, report=report, conflicts=[
                    "model: the two sides' weights apply to different base models; merge them by hand"])
            try:
                merged, details = _merge_numeric(ctx.repo.store, numeric, base, ours, theirs, spec)
            except MergeRefused as e:
                return LayerResult("model", False, report=report, conflicts=[f"model: {e}"])
            report.update(details)
            changes.update({p: c for p, c in merged.changes(TreeWriter(git)).items() if p in numeric})
            rank = report.get("adapter", {}).get("rank")
            trailer = spec.trailer(rank)
        summary = read_state(git, edit(TreeWriter(git), git, bytes.fromhex(ctx.ours.tree), changes).hex()).summary()
        return LayerResult("model", True, changes=changes, summary=summary, report=report, trailer=trailer)


def _merge_numeric(store, parts, base: ModelState, ours: ModelState, theirs: ModelState, spec: MergeSpec):
    """The merged state of the numeric ``parts`` plus a report per part."""
    try:
        from . import combine
    except ImportError as e:
        raise UsageError(f"merging two changed adapters needs torch (install git-pf[model]): {e}") from None
    names = ["ours", "theirs"]
    merged, details = ours, {}
    if ADAPTER in parts:
        out = combine.merge_adapters(store, [ours.adapter, theirs.adapter], base.adapter, spec, names)
        merged, details["adapter"] = merged.with_parts(adapter=out.stored), out.report
    if DELTA in parts:
        out = combine.merge_deltas(store, [ours.delta, theirs.delta], base.delta, spec, names)
        merged, details["delta"] = merged.with_parts(delta=out.stored), out.report
    return merged, details
