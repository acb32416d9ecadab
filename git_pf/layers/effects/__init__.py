"""The effects layer: the hash-chained, append-only ledger ``effects/ledger.jsonl`` of tool
calls with side effects (``ledger``), what a snapshot writes of it (``snapshot_input``), its
diff (``diff``), fsck checks (``check``) and merge (``merge``). Imports as ``git_pf.layers``
says (docs/architecture.md).
"""

from ... import image as _img
from ..registry import Layer

LAYERS = (Layer("effects", (b"effects",), "git_pf.layers.effects.merge:EffectsMerger",
                parsers={_img.EFFECTS_LEDGER: "git_pf.layers.effects.ledger:decode"},
                files=(_img.EFFECTS_LEDGER,), input="git_pf.layers.effects.snapshot_input:write",
                diff="git_pf.layers.effects.diff:diff", diff_paths=(_img.EFFECTS_LEDGER,), diff_rank=3,
                fsck="git_pf.layers.effects.check:problems"),)
