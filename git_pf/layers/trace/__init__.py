"""The trace layer: ``trace/messages.jsonl`` (``messages``) and the recorded LLM exchanges
under ``trace/tape/`` (``tape``), what a snapshot writes of them (``snapshot_input``), their
diff (``diff``), checks (``check``: each tape entry, and fsck's) and merge (``merge``, with the
summary of the other branch in ``summary``). ``TraceLayer`` is the layer's ``Layer`` object.
Imports as ``git_pf.layers`` says (docs/architecture.md).
"""

from ...image import manifest as _img
from ..base import Layer, naming


class TraceLayer(Layer):
    """The conversation and its recorded exchanges (the tape, checked and checked out entry by entry)."""

    name = "trace"
    claims = (b"trace",)
    files = (_img.TRACE_MESSAGES, _img.TRACE_TAPE)
    parsers = {_img.TRACE_MESSAGES: "git_pf.layers.trace.messages:decode"}
    tree_checks = {_img.TRACE_TAPE: "git_pf.layers.trace.check:tape_problems"}
    merger = "git_pf.layers.trace.merge:TraceMerger"
    diff_paths, diff_rank = (_img.TRACE_MESSAGES, _img.TRACE_TAPE), 2
    counts = {"trace": ("messages", "tokens_estimate"), "tape": ("exchanges",)}
    keywords = ("messages",)

    def input_from(self, keywords):
        from .snapshot_input import MessagesGiven

        given = keywords.get("messages")
        return None if given is None else MessagesGiven(given)

    def input_from_flags(self, flags):
        from .snapshot_input import from_flags

        return from_flags(flags)

    def input(self, snap):
        from .snapshot_input import write

        return write(snap)

    def checkout_plan(self, git, image):
        from . import tape

        plan = super().checkout_plan(git, image)
        with naming(image):  # each entry, loose or packed, checked (``tape.stored``)
            tape.read(git, image.tree)
            plan += [(tape.PATH + b"/" + name, data) for name, data, _ in tape.stored(git, image.tree)]
        return plan

    def diff(self, git, a, b):
        from .diff import diff

        return diff(git, a, b)

    def side_taken(self, ctx, parsed):
        ctx.merged_messages = parsed.get(_img.TRACE_MESSAGES) or []

    def merged_summaries(self, git, ours_tree, changes):
        from . import tape

        found = tape.merged_summary(git, ours_tree, changes)
        return {} if found is None else {tape.NAME: found}

    def report_line(self, result):
        rep = result.report
        how = rep.get("resolution", "")
        text = None
        if how == "summary":
            n = rep["summarized_messages"]
            text = (f"ours + 1 merge message summarising {n} message{'s' if n != 1 else ''} "
                    f"(~{rep['summarized_tokens']} tokens, summariser: {rep['summarizer']})")
        if "prefill_tokens" in rep and how != "conflict":
            from ..base import generic_report_line

            text = (text or generic_report_line(result)) + f"; ~{rep['prefill_tokens']} tokens to re-prefill"
        return text

    def fsck(self, git, store, image, out, seen, remote_has):
        from .check import problems

        problems(git, store, image, out, seen, remote_has)


LAYERS = (TraceLayer(),)
