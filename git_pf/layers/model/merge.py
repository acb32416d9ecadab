"""The model layer's three-way merge for ``git pf merge`` (the layer's ``merger``).

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

from ...core.errors import UsageError
from ...image.tree import TreeWriter, edit
from ...merge.layer import LayerResult, MergeContext
from .options import MergeRefused, MergeSpec
from .state import ADAPTER, BASE, DELTA, PARTS, ModelState, part_ids, read_state

WHAT = {BASE: "base.json", ADAPTER: "adapter", DELTA: "delta"}
_AMBIGUOUS = ("ambiguous",)  # a part on which several merge bases disagree


def _base_ids(git, ctx: MergeContext) -> dict:
    """Part ids of the merge base; a part on which several bases (criss-cross) disagree is ambiguous."""
    bases = list(getattr(ctx, "bases", None) or ([ctx.base] if ctx.base else []))
    found = [part_ids(git, b.tree) for b in bases] or [part_ids(git, None)]
    return {p: found[0][p] if all(f[p] == found[0][p] for f in found) else _AMBIGUOUS for p in PARTS}


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
            conflicts.append("CONFLICT (model): both sides changed the base model differently")
        elif o is None or t is None:
            who = "ours" if o is None else "theirs"
            conflicts.append(f"CONFLICT (model): {who} deleted the {WHAT[part]}, the other side changed it")
        else:
            numeric.append(part)
            resolution[WHAT[part]] = "merged"
    return changes, resolution, numeric, conflicts


def _overall(resolution: dict) -> str:
    """One word for the layer: unchanged, ours, theirs, or merged (numeric, or parts from both sides)."""
    values = set(resolution.values()) - {"unchanged"}
    if not values:
        return "unchanged"
    return values.pop() if len(values) == 1 else "merged"


class ModelMerger:
    name = "model"

    def merge(self, ctx: MergeContext) -> LayerResult:
        spec = MergeSpec.from_options(ctx.options)
        git = ctx.repo.git
        ours_ids, theirs_ids = part_ids(git, ctx.ours.tree), part_ids(git, ctx.theirs.tree)
        changes, parts, numeric, conflicts = resolve_parts(_base_ids(git, ctx), ours_ids, theirs_ids)
        report: dict = {"resolution": _overall(parts), "parts": parts}
        if conflicts:
            return _conflict(report, conflicts)
        if numeric and getattr(ctx, "dry_run", False):
            report.update({WHAT[p]: spec.to_json() for p in numeric})
            return LayerResult("model", True, report=report, trailer=spec.trailer())
        trailer = f"model {report['resolution']}"
        if numeric:
            base, ours, theirs = (read_state(git, image.tree if image else None)
                                  for image in (ctx.base, ctx.ours, ctx.theirs))
            if ours.base != theirs.base:
                return _conflict(report, ["CONFLICT (model): the two sides' weights apply to different base models"])
            try:
                merged, details = _merge_numeric(ctx.repo.store, numeric, base, ours, theirs, spec)
            except MergeRefused as e:
                return _conflict(report, [f"CONFLICT (model): {e}"])
            report.update(details)
            changes.update({p: c for p, c in merged.changes(TreeWriter(git)).items() if p in numeric})
            trailer = spec.trailer(report.get("adapter", {}).get("rank"))
        if not changes:
            return LayerResult("model", True, report=report, trailer=trailer)
        summary = read_state(git, edit(TreeWriter(git), git, bytes.fromhex(ctx.ours.tree), changes).hex()).summary()
        return LayerResult("model", True, changes=changes, summary=summary, report=report, trailer=trailer)


def _conflict(report: dict, lines: list[str]) -> LayerResult:
    return LayerResult("model", False, report=dict(report, resolution="conflict"), conflicts=lines,
                       trailer="model conflict")


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
