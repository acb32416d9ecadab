"""The blame chart's data: a blame run's summary (docs/blame.md), as the report embeds it.

``view`` asks the blame engine's reader (``git_pf.blame.store.summary``: the run's
``refs/pf/blame/<run>/meta`` and one verdict ref per finished trial) and keeps the fields
the chart draws, checked as numbers and strings, since the refs are data like any other.
A blame run is drawn only when the revision it blamed (its ``rev``) is a commit of the
report's run line: a run of the same name that blamed another revision is not this run's.
``views`` gives every such run, so the page can show them one at a time.
Read-only.
"""
from __future__ import annotations

import math

from ..blame import store
from ..core.errors import UsageError

LABELS = ("decisive", "suggestive", "none", "insufficient")


def default_run(repo, rev: str) -> str | None:
    """The blame run named after REV's branch (as ``git pf blame`` names it), or None."""
    try:
        return store.default_run(repo.git, rev)
    except UsageError:
        return None


def views(repo, line: set[str], chosen: dict | None) -> list[dict]:
    """Every blame run of the report's run (``chosen``, the one the chart opens with, first), for the
    page to show one at a time."""
    out = [chosen] if chosen is not None else []
    for name in store.runs(repo):
        if chosen is not None and name == chosen["run"]:
            continue
        found = view(repo, name, line=line, required=False)
        if found is not None:
            out.append(found)
    return out


def _num(value, default=None):
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) \
        and math.isfinite(value) else default


def _interval(value):
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(_num(v) is not None for v in value):
        return [min(max(_num(v), 0.0), 1.0) for v in value]
    return None


def _count(value) -> int:
    return value if type(value) is int and value >= 0 else 0


def _row(row: dict) -> dict:
    rate = _num(row.get("rate"))
    return {"step": _count(row.get("step")), "trials": _count(row.get("trials")), "flips": _count(row.get("flips")),
            "no_flips": _count(row.get("no_flips")), "undefined": _count(row.get("undefined")),
            "rate": None if rate is None else min(max(rate, 0.0), 1.0), "wilson": _interval(row.get("wilson")),
            "p": _num(row.get("p")), "q": _num(row.get("q")),
            "label": row.get("label") if row.get("label") in LABELS else "insufficient"}


def view(repo, blame, *, line: set[str], required: bool) -> dict | None:
    """The chart's data for ``blame`` (a run name, or a summary dict already loaded) when the
    revision it blamed is one of ``line`` (the commit ids of the report's run); None when there is
    none. A run asked for (``required``) that does not exist or blamed another revision is a UsageError."""
    if blame is None:
        return None
    summary = blame if isinstance(blame, dict) else store.summary(repo, blame)
    if summary is None:
        if required:
            raise UsageError(f"no blame run '{blame}'", param="blame")
        return None
    rev = summary.get("rev")
    if not (isinstance(rev, str) and rev in line):
        if required:
            raise UsageError(f"blame run '{summary.get('run') or blame}' blamed {str(rev)[:12]}, "
                             "which is not a step of this run", param="blame")
        return None
    rows = [_row(r) for r in summary.get("steps") or [] if isinstance(r, dict)]
    decisive = summary.get("decisive")
    return {"run": str(summary.get("run") or blame), "k": _count(summary.get("k")),
            "perturb": str(summary.get("perturb") or ""), "steps": rows,
            "decisive": decisive if type(decisive) is int else None,
            "null_rate": _num(summary.get("null_rate"),
                              next((_num(r.get("null_rate")) for r in summary.get("steps") or []
                                    if isinstance(r, dict) and _num(r.get("null_rate")) is not None), None))}
