"""The effects layer: the hash-chained, append-only ledger ``effects/ledger.jsonl`` of tool
calls with side effects (``ledger``) and its merge (``merge``). Imports as ``git_pf.layers``
says (docs/architecture.md).
"""

from ... import image as _img
from ..registry import Layer

LAYERS = (Layer("effects", (b"effects",), "git_pf.layers.effects.merge:EffectsMerger",
                parsers={_img.EFFECTS_LEDGER: "git_pf.layers.effects.ledger:decode"},
                files=(_img.EFFECTS_LEDGER,)),)
