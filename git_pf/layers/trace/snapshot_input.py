"""What a snapshot writes of the trace layer (``Layer.input``): ``trace/messages.jsonl``
and, when given, the tape.

Messages given replace the parent's; ones not given are the parent's, read and written
again (none when the parent has none). A tape given (``TapeInput``) replaces the
parent's; one not given stays as it is. Writes through the snapshot's ``TreeEdit``;
moves no refs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import manifest as img
from . import messages as trace, tape


@dataclass(frozen=True)
class MessagesGiven:
    """The trace layer's input in a ``SnapshotRequest``: the messages so far."""

    messages: list[dict]


def write(snap) -> dict[str, dict]:
    """The messages and the tape; ``layers.trace`` (and ``layers.tape`` when a tape is given)."""
    found = snap.given("trace")
    given = None if found is None else found.messages
    messages = given if given is not None else snap.inherited(img.TRACE_MESSAGES, trace.decode, [])
    snap.edit.put_file(img.TRACE_MESSAGES, trace.encode(messages))
    return {"trace": {"messages": len(messages), "tokens_estimate": trace.estimate_tokens(messages)},
            **snap.write_given(tape.NAME)}
