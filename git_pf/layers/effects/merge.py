"""The effects layer merger: ours' ledger, then what theirs added, never losing or doubling an effect.

Both ledgers are read and chain-checked first: a ledger that cannot be
parsed, or whose chain is broken, fails the merge (DataError, exit 3). The
result always extends ours' ledger (the merge image's first parent), as
every image's ledger must (docs/format.md §9): ours' entries as they are,
then theirs' entries that neither ours nor the ancestor holds, in theirs'
order, with the ``prev`` chain continued. One key carrying different
entries on the two sides is a conflict. Theirs re-running an irreversible
effect that ours or the ancestor already holds is a conflict: under the
same key always, under another key (same tool and argument hash) unless
``--accept-duplicate-effects``. Writes one blob.
"""
from __future__ import annotations

from ...core import canonjson
from ...image import manifest as img
from . import ledger as ledger_fmt
from ...core.errors import DataError
from ...image.layercheck import load
from ...merge.layer import LayerResult, MergeContext
from ...merge.tree3 import base_entry, blob, entry, pick

ACCEPT = "effects.accept_duplicates"
IRREVERSIBLE = "irreversible"


def read_ledger(git, image) -> list[dict]:
    """An image's ledger, parsed and chain-checked; DataError naming the image otherwise."""
    entries = load(git, image, img.EFFECTS_LEDGER, [])
    problems = ledger_fmt.verify(entries)
    if problems:
        raise DataError(f"image {image.short}: effects {problems[0]}")
    return entries


def _unlinked(e: dict) -> dict:
    """An entry without its chain link."""
    return {k: v for k, v in e.items() if k != "prev"}


def _bare(e: dict) -> bytes:
    """An entry without its chain link, as canonical bytes (what two sides compare)."""
    return canonjson.canonical_bytes(_unlinked(e))


class _Union:
    """ours' ledger plus theirs' additions, with the conflicts and duplicates found on the way."""

    def __init__(self, ours: list[dict], theirs: list[dict], bases: list[list[dict]]):
        held = ours + [e for b in bases for e in b]  # what is already done, on ours' side or before the fork
        by_key: dict[str, set[bytes]] = {}
        for e in ours:
            by_key.setdefault(e["idempotency_key"], set()).add(_bare(e))
        known = {_bare(e) for e in held}
        self.before_fork = {e["idempotency_key"] for b in bases for e in b}
        done = [e for e in held if e["side_effect_class"] == IRREVERSIBLE]
        done_keys = {e["idempotency_key"] for e in done}
        done_calls: dict[tuple, dict[str, None]] = {}  # keys in first-seen order, each once
        for e in done:
            done_calls.setdefault((e["tool"], e["args_hash"]), {})[e["idempotency_key"]] = None
        self.added: list[dict] = []
        self.conflicts: list[str] = []
        self.duplicates: list[dict] = []
        for e in theirs:
            key, bare = e["idempotency_key"], _bare(e)
            if bare in by_key.get(key, ()) or bare in known:
                continue  # ours holds it, or ours dropped it from the ancestor in a declared rewrite
            if e["side_effect_class"] == IRREVERSIBLE and key in done_keys:
                self.conflicts.append(f"CONFLICT (effects): irreversible {ledger_fmt.quote(e['tool'])} re-run by "
                                      f"theirs under key {ledger_fmt.label(e)}, which ours or the ancestor already holds")
                continue
            if key in by_key:
                self.conflicts.append(f"CONFLICT (effects): entry {ledger_fmt.label(e)} differs between ours and theirs")
                continue
            if e["side_effect_class"] == IRREVERSIBLE:
                self.duplicates += [{"tool": e["tool"], "args_hash": e["args_hash"], "ours_key": k, "theirs_key": key}
                                    for k in done_calls.get((e["tool"], e["args_hash"]), [])]
                done_keys.add(key)  # theirs repeating its own key is a re-run too
            self.added.append(e)
        self.merged = ledger_fmt.chain(ours + [_unlinked(e) for e in self.added], "merged ledger")  # ours' links are sound (checked), theirs' re-made


class EffectsMerger:
    name = "effects"

    def merge(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        ours, theirs = read_ledger(git, ctx.ours), read_ledger(git, ctx.theirs)
        b = base_entry(git, ctx.bases, img.EFFECTS_LEDGER)
        o, t = entry(git, ctx.ours, img.EFFECTS_LEDGER), entry(git, ctx.theirs, img.EFFECTS_LEDGER)
        choice = pick(b, o, t)
        if choice in ("unchanged", "same", "ours"):
            return LayerResult("effects", True, report={"resolution": choice}, trailer=f"effects {choice}")
        return self._union(ctx, ours, theirs)

    def take_side(self, ctx: MergeContext, side: str) -> LayerResult | None:
        """``--prefer effects=SIDE``: None when the side can be taken whole; a conflict when
        theirs' ledger does not extend ours' or adds what the union would flag."""
        git = ctx.repo.git
        ours, theirs = read_ledger(git, ctx.ours), read_ledger(git, ctx.theirs)
        if side == "ours":
            return None
        problem = ledger_fmt.extension_problem(ours, theirs)
        if problem is not None:
            line = (f"CONFLICT (effects): --prefer effects=theirs would drop or change ours' {problem}; the ledger "
                    f"only grows along first parents: merge without it (union) or use --prefer effects=ours")
            return LayerResult("effects", False, report={"resolution": "theirs (--prefer)"}, conflicts=[line])
        result = self._union(ctx, ours, theirs)
        return result if result.conflicts else None

    def _union(self, ctx: MergeContext, ours: list[dict], theirs: list[dict]) -> LayerResult:
        git = ctx.repo.git
        u = _Union(ours, theirs, [read_ledger(git, i) for i in ctx.bases])
        accepted = bool(ctx.options.get(ACCEPT))
        conflicts = list(u.conflicts)
        if u.duplicates and not accepted:
            q = ledger_fmt.quote
            conflicts += [f"CONFLICT (effects): irreversible {q(d['tool'])} "
                          f"{'done before the fork and again by theirs' if d['ours_key'] in u.before_fork else 'done on both sides'} "
                          f"(keys {q(d['ours_key'])} and {q(d['theirs_key'])}; --accept-duplicate-effects keeps both)"
                          for d in u.duplicates]
        data = ledger_fmt.encode(u.merged)
        if not conflicts and data == img.read_file(git, ctx.theirs.tree, img.EFFECTS_LEDGER):
            summary = ctx.theirs.manifest.get("layers", {}).get("effects")
            return LayerResult("effects", True, {img.EFFECTS_LEDGER: entry(git, ctx.theirs, img.EFFECTS_LEDGER)},
                               summary, {"resolution": "theirs"}, trailer="effects theirs")
        summary = {"entries": len(u.merged),
                   "irreversible": sum(1 for e in u.merged if e["side_effect_class"] == IRREVERSIBLE)}
        dups = bool(u.duplicates) and accepted
        report = {"resolution": "union", "entries": len(u.merged), "from_theirs": len(u.added),
                  "duplicates": u.duplicates, "duplicates_accepted": dups}
        trailer = f"effects union entries={len(u.merged)} from_theirs={len(u.added)}" + (" duplicates-accepted" if dups else "")
        return LayerResult("effects", not conflicts, {img.EFFECTS_LEDGER: blob(git, data)}, summary, report, conflicts,
                           trailer)
