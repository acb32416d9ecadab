"""The effects layer: the hash-chained, append-only ledger ``effects/ledger.jsonl`` of tool
calls with side effects (``ledger``), what a snapshot writes of it (``snapshot_input``), its
diff (``diff``), fsck checks (``check``) and merge (``merge``). ``EffectsLayer`` is the
layer's ``Layer`` object. Imports as ``git_pf.layers`` says (docs/architecture.md).
"""

from ...image import manifest as _img
from ..base import Layer


class EffectsLayer(Layer):
    """The ledger: it only grows along first parents, so taking theirs whole may be refused."""

    name = "effects"
    claims = (b"effects",)
    files = (_img.EFFECTS_LEDGER,)
    parsers = {_img.EFFECTS_LEDGER: "git_pf.layers.effects.ledger:decode"}
    merger = "git_pf.layers.effects.merge:EffectsMerger"
    diff_paths, diff_rank = (_img.EFFECTS_LEDGER,), 3
    counts = {"effects": ("entries", "irreversible")}
    keywords = ("effects", "rewrite_effects")

    def input_from(self, keywords):
        from .snapshot_input import EffectsGiven

        return EffectsGiven.from_keywords(keywords)

    def input_from_flags(self, flags):
        from ...core import jsonl

        return jsonl.read(flags["effects"], "--effects") if flags.get("effects") is not None else None

    def input(self, snap):
        from .snapshot_input import write

        return write(snap)

    def diff(self, git, a, b):
        from .diff import diff

        return diff(git, a, b)

    def merge_options(self, req):
        from .merge import ACCEPT

        return {ACCEPT: req.accept_duplicate_effects}

    def take_side(self, ctx, side):
        return self.make_merger().take_side(ctx, side)

    def report_line(self, result):
        rep = result.report
        if rep.get("resolution") != "union":
            return None
        text = f"union: {rep['entries']} entries, {rep['from_theirs']} from theirs"
        if rep.get("duplicates"):
            text += f", {len(rep['duplicates'])} duplicated irreversible" + (" (accepted)" if rep.get("duplicates_accepted") else "")
        return text

    def fsck(self, git, store, image, out, seen, remote_has):
        from .check import problems

        problems(git, store, image, out, seen, remote_has)


LAYERS = (EffectsLayer(),)
