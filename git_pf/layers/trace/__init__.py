"""The trace layer: ``trace/messages.jsonl`` (``messages``) and the recorded LLM exchanges
under ``trace/tape/`` (``tape``), what a snapshot writes of them (``snapshot_input``), their
diff (``diff``), checks (``check``: each tape entry, and fsck's) and merge (``merge``, with the
summary of the other branch in ``summary``).
Imports as ``git_pf.layers`` says (docs/architecture.md).
"""

from ... import image as _img
from ..registry import Layer

LAYERS = (Layer("trace", (b"trace",), "git_pf.layers.trace.merge:TraceMerger",
                parsers={_img.TRACE_MESSAGES: "git_pf.layers.trace.messages:decode"},
                tree_checks={_img.TRACE_TAPE: "git_pf.layers.trace.check:tape_problems"},
                files=(_img.TRACE_MESSAGES, _img.TRACE_TAPE), input="git_pf.layers.trace.snapshot_input:write",
                diff="git_pf.layers.trace.diff:diff", diff_paths=(_img.TRACE_MESSAGES, _img.TRACE_TAPE), diff_rank=2,
                fsck="git_pf.layers.trace.check:problems"),)
