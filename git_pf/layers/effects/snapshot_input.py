"""What a snapshot writes of the effects layer (``Layer.input``): ``effects/ledger.jsonl``.

A ledger given is chained (each entry's hash and its predecessor's) and must extend
the parent's (docs/format.md §9) and record no irreversible effect twice; a ledger
that drops or changes the parent's entries is refused unless the request declares a
rewrite, which adds the ``Pf-Rewrite-Effects`` trailer. A ledger not given is the
parent's, read and written again. Writes through the snapshot's ``TreeEdit``; moves
no refs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import manifest as img
from ...core.errors import UsageError
from . import ledger as effects


@dataclass(frozen=True)
class EffectsGiven:
    """The effects layer's input: the whole ledger, and the reason it may drop or change the
    parent's entries (``Pf-Rewrite-Effects``; None: it may not)."""

    entries: list[dict]
    rewrite: str | None = None

    @classmethod
    def from_keywords(cls, keywords: dict) -> "EffectsGiven | None":
        """From ``SnapshotRequest(effects=..., rewrite_effects=...)``; None when no ledger is given."""
        if keywords.get("effects") is None:
            return None
        return cls(keywords["effects"], keywords.get("rewrite_effects"))


def write(snap) -> dict[str, dict]:
    """The ledger; ``layers.effects``."""
    given = snap.given("effects")
    if given is not None:
        entries = effects.chain(given.entries, "--effects")
        if _is_rewrite(snap, given, entries):
            snap.trailers.append((effects.REWRITE_TRAILER, given.rewrite))
    else:
        entries = snap.inherited(img.EFFECTS_LEDGER, effects.decode, [])
    snap.edit.put_file(img.EFFECTS_LEDGER, effects.encode(entries))
    irreversible = sum(1 for e in entries if e.get("side_effect_class") == "irreversible")
    return {"effects": {"entries": len(entries), "irreversible": irreversible}}


def _is_rewrite(snap, given: EffectsGiven, entries: list[dict]) -> bool:
    """Refuse a given ledger that repeats an irreversible effect, or that does not extend the
    parent's without a declared rewrite; True when it is such a rewrite."""
    repeats = effects.repeated_irreversible(entries)
    if repeats:
        key, first, again = repeats[0]
        raise UsageError(f"irreversible effect {key} is recorded twice (entries {first} and {again}); "
                         f"an irreversible effect happens once", param="effects")
    problem = effects.extension_problem(snap.inherited(img.EFFECTS_LEDGER, effects.decode, []), entries)
    if problem is None:
        return False
    if given.rewrite is None:
        raise UsageError(f"not an extension of the parent image's ledger: {problem} "
                         f"(the ledger only grows; --rewrite-effects records a deliberate rewrite)", param="effects")
    return True
