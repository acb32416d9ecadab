"""The effects layer merger: the union of both ledgers, keyed by idempotency key.

Entries are ordered by time (RFC 3339 strings and epoch numbers compare as
instants) then key, and the ``prev`` chain is recomputed. One key carrying
different entries on the two sides is a conflict. The same irreversible
effect (same tool and argument hash under different keys) added on both
sides since the ancestor is a duplicated irreversible effect: a conflict
unless ``--accept-duplicate-effects``. Writes one blob.
"""
from __future__ import annotations

from datetime import datetime, timezone

from .. import effects as ledger_fmt, image as img
from .layer import LayerResult, MergeContext
from .tree3 import base_entry, blob, entry, pick

ACCEPT = "effects.accept_duplicates"


def _ledger(git, image) -> list[dict]:
    data = img.read_file(git, image.tree, img.EFFECTS_LEDGER) if image is not None else None
    return ledger_fmt.decode(data) if data else []


def _keyed(entries: list[dict]) -> dict[str, dict]:
    return {e["idempotency_key"]: {k: v for k, v in e.items() if k != "prev"} for e in entries}


def _instant(ts) -> tuple:
    if isinstance(ts, (int, float)) and not isinstance(ts, bool):
        return (0, float(ts), "")
    try:
        moment = datetime.fromisoformat(str(ts).replace("Z", "+00:00").replace("z", "+00:00"))
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=timezone.utc)  # naive times are read as UTC, on every machine
        return (0, moment.timestamp(), "")
    except ValueError:
        return (1, 0.0, str(ts))  # unparseable times sort after every instant, by text


def duplicates(new_ours: dict[str, dict], new_theirs: dict[str, dict]) -> list[dict]:
    """Irreversible effects both sides added with the same tool and arguments under different keys."""
    index: dict[tuple, list[str]] = {}
    for key, e in new_ours.items():
        if e.get("side_effect_class") == "irreversible":
            index.setdefault((e["tool"], e["args_hash"]), []).append(key)
    out = []
    for key, e in sorted(new_theirs.items()):
        if e.get("side_effect_class") != "irreversible":
            continue
        for ours_key in index.get((e["tool"], e["args_hash"]), []):
            if ours_key != key:
                out.append({"tool": e["tool"], "args_hash": e["args_hash"], "ours_key": ours_key, "theirs_key": key})
    return out


class EffectsMerger:
    name = "effects"

    def merge(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        b = base_entry(git, ctx.bases, img.EFFECTS_LEDGER)
        o, t = entry(git, ctx.ours, img.EFFECTS_LEDGER), entry(git, ctx.theirs, img.EFFECTS_LEDGER)
        choice = pick(b, o, t)
        if choice in ("unchanged", "same", "ours"):
            return LayerResult("effects", True, report={"resolution": choice}, trailer=f"effects {choice}")
        if choice == "theirs":
            summary = ctx.theirs.manifest.get("layers", {}).get("effects")
            return LayerResult("effects", True, {img.EFFECTS_LEDGER: t}, summary, {"resolution": "theirs"},
                               trailer="effects theirs")
        return self._union(ctx)

    def _union(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        ours, theirs = _keyed(_ledger(git, ctx.ours)), _keyed(_ledger(git, ctx.theirs))
        base_keys = set().union(*(_keyed(_ledger(git, i)).keys() for i in ctx.bases)) if ctx.bases else set()
        conflicts = [f"CONFLICT (effects): entry '{k}' differs between ours and theirs"
                     for k in sorted(ours.keys() & theirs.keys()) if ours[k] != theirs[k]]
        dups = duplicates({k: v for k, v in ours.items() if k not in base_keys},
                          {k: v for k, v in theirs.items() if k not in base_keys})
        accepted = bool(ctx.options.get(ACCEPT))
        if dups and not accepted:
            conflicts += [f"CONFLICT (effects): irreversible '{d['tool']}' done on both sides "
                          f"(keys '{d['ours_key']}' and '{d['theirs_key']}'; --accept-duplicate-effects keeps both)"
                          for d in dups]
        union = {**theirs, **ours}
        ordered = sorted(union.values(), key=lambda e: (_instant(e["ts"]), e["idempotency_key"]))
        chained = ledger_fmt.chain(ordered, "merged ledger")
        added = len(union) - len(ours)
        summary = {"entries": len(chained),
                   "irreversible": sum(1 for e in chained if e.get("side_effect_class") == "irreversible")}
        report = {"resolution": "union", "entries": len(chained), "from_theirs": added, "duplicates": dups,
                  "duplicates_accepted": accepted and bool(dups)}
        trailer = f"effects union entries={len(chained)} from_theirs={added}" + (" duplicates-accepted" if dups and accepted else "")
        return LayerResult("effects", not conflicts, {img.EFFECTS_LEDGER: blob(git, ledger_fmt.encode(chained))},
                           summary, report, conflicts, trailer)
