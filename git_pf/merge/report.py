"""The merge report: one JSON document (schema in docs/merge.md) and its text form.

Pure formatting of a ``MergeResult``; prints nothing itself. Each layer words its own line
(``Layer.report_line``); no layer is named here.
"""
from __future__ import annotations

from ..layers import registry


SCHEMA = 1


def to_json(result) -> dict:
    layers = []
    for r in result.layers:
        structured = r.report.get("conflicts")
        if not isinstance(structured, list) or len(structured) != len(r.conflicts):
            structured = [{"path": None, "kind": r.layer, "message": line} for line in r.conflicts]
        item = {"layer": r.layer, "status": "clean" if r.clean else "conflict", "conflicts": structured}
        item.update({k: v for k, v in r.report.items() if k not in item})
        layers.append(item)
    return {
        "schema": SCHEMA,
        "status": result.status,
        "dry_run": result.dry_run,
        "branch": result.branch,
        "ours": result.ours.id,
        "theirs": result.theirs.id,
        "theirs_rev": result.theirs_name,
        "bases": list(result.bases),
        "image": result.image.id if result.image is not None else None,
        "checkout": result.checkout,
        "conflicts": sum(len(r.conflicts) for r in result.layers),
        "layers": layers,
    }


def _detail(r) -> str:
    """The text of one layer's line: as its layer words it (``Layer.report_line``), else how it resolved."""
    layer = registry.get(r.layer)
    return (layer.report_line(r) if layer is not None else None) or registry.generic_report_line(r)


def lines(result) -> list[str]:
    out = [f"Merging {result.theirs_name} ({result.theirs.short}) into {result.branch} ({result.ours.short})"]
    if result.status == "up-to-date":
        return out + ["Already up to date."]
    if len(result.bases) > 1:
        out.append(f"ancestors: {', '.join(b[:12] for b in result.bases)} (criss-cross: git's virtual base)")
    elif result.bases:
        out.append(f"ancestor: {result.bases[0][:12]}")
    else:
        out.append("ancestor: none (unrelated histories)")
    if result.status == "fast-forward":
        return out + [f"Fast-forward{' (dry run)' if result.dry_run else ''}: {result.branch} -> {result.theirs.short}"]
    for r in result.layers:
        state = "clean" if r.clean else f"CONFLICT ({len(r.conflicts)})"
        out.append(f"  {r.layer:<8} {state:<13} {_detail(r)}")
    for r in result.layers:
        out += r.conflicts
    total = sum(len(r.conflicts) for r in result.layers)
    if result.status == "conflict":
        bad = ", ".join(r.layer for r in result.layers if not r.clean)
        out.append(f"Automatic merge failed: {total} conflict{'s' if total != 1 else ''} in {bad}; no image written.")
        if result.checkout:
            out.append(f"Conflicted world written to {result.checkout}; resolve, then "
                       f"'git pf merge --continue {result.checkout}' (or --abort).")
        else:
            out.append("Resolve with --prefer LAYER=ours|theirs, or --checkout DIR to edit the world by hand.")
    elif result.dry_run:
        out.append("Dry run: the merge is clean; nothing written.")
    else:
        out.append(f"Merged: image {result.image.id} on branch {result.branch}")
    return out
