"""What a snapshot writes of the trace layer (``Layer.input``): ``trace/messages.jsonl``
and, when given, the tape.

Messages given replace the parent's; ones not given are the parent's, read and written
again (none when the parent has none). A tape given (``TapeInput``) replaces the
parent's; one not given stays as it is. Writes through the snapshot's ``TreeEdit``;
moves no refs.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...image import manifest as img
from . import messages as trace, tape


@dataclass(frozen=True)
class TraceInput:
    """The trace layer: the messages so far and/or the recorded LLM exchanges (the tape). Each
    part given replaces the parent's; a part left as None is carried over."""

    messages: list[dict] | None = None
    tape: list[dict] | None = None
    keep: frozenset[str] = field(default_factory=frozenset)  # tape keys whose values stay unredacted


def from_flags(flags) -> TraceInput | None:
    """``--messages`` (JSONL) and ``--tape`` (JSONL or a directory of exchanges)."""
    from ...core import jsonl

    messages, exchanges = flags.get("messages"), flags.get("tape")
    if messages is None and exchanges is None:
        return None
    return TraceInput(messages=jsonl.read(messages, "--messages") if messages is not None else None,
                      tape=tape.read_input(exchanges) if exchanges is not None else None)


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
