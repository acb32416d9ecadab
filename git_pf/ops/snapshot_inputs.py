"""What a snapshot is given, layer by layer: the typed inputs of ``Repo.snapshot`` and a mount
snapshot, turned into one ``SnapshotRequest``.

Every layer is given the same way, by its name: ``trace=TraceInput(...)``,
``effects=[entries]``, ``env=EnvInput(...)`` (or an ``Env`` / a dict of
variables), ``model=ModelInput``, ``cache=CacheInput``; the world is the
directory itself. The keywords of the first release (``messages=``,
``layers=(...)``) still work and warn (``DeprecationWarning``) until the next
one. Builds requests; captures and writes nothing.

``TraceInput`` and ``EnvInput`` are defined by their layers (``layers.trace.snapshot_input``,
``layers.world.snapshot_input``), as ``ModelInput`` and ``CacheInput`` are; this module is
their public name.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from ..image import manifest as img
from ..core.errors import UsageError
from ..layers.trace.snapshot_input import TraceInput
from ..layers.world.env import Env
from ..layers.world.snapshot_input import EnvInput
from .snapshot import SnapshotRequest, rewrite_reason

__all__ = ["EnvInput", "TraceInput", "request"]


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"snapshot({old}=...) is deprecated; use {new}", DeprecationWarning, stacklevel=4)


def _env(value) -> Env | None:
    if value is None or isinstance(value, Env):
        return value
    if isinstance(value, dict):
        return Env(None, dict(value))
    raise UsageError(f"expected an EnvInput, Env or dict, not {type(value).__name__}", param="env")


def _typed(value, kind: str, param: str):
    if value is not None and getattr(value, "name", None) != kind:
        raise UsageError(f"expected the {kind} layer's input, not {type(value).__name__}", param=param)
    return value


def request(fs_root, *, name: str | None = None, agent: Any = None, trace: TraceInput | None = None,
            effects: list[dict] | None = None, env: EnvInput | Env | dict | None = None, model: Any = None,
            cache: Any = None, no_redact=frozenset(), message: str | None = None, label: str | None = None,
            ignore=(), allow_empty: bool = False, rewrite_effects: bool | str = False, switch: bool = False,
            messages: list[dict] | None = None, layers: tuple = ()) -> SnapshotRequest:
    """The request for a snapshot of ``fs_root`` with these layer inputs."""
    from ..layers.trace.tape import TapeInput
    from ..layers.world.procs import ProcsInput

    if trace is not None and not isinstance(trace, TraceInput):
        raise UsageError(f"expected a TraceInput, not {type(trace).__name__}", param="trace")
    if messages is not None:
        if trace is not None:
            raise UsageError("give the messages once, in trace=TraceInput(messages=...)", param="messages")
        _deprecated("messages", "trace=TraceInput(messages=...)")
        trace = TraceInput(messages=messages)
    if layers:
        _deprecated("layers", "trace=, env=, model= or cache=")
    trace = trace or TraceInput()
    env_input = env if isinstance(env, EnvInput) else EnvInput(env)
    extra = tuple(layers)
    if trace.tape is not None:
        extra += (TapeInput(trace.tape, frozenset(trace.keep) | frozenset(no_redact)),)
    if env_input.procs is not None:
        extra += (ProcsInput(env_input.procs),)
    extra += tuple(x for x in (_typed(model, "model", "model"), _typed(cache, "cache", "cache")) if x is not None)
    if isinstance(agent, str) or agent is None:
        agent = img.Agent.parse(agent)
    # each layer builds its input (SnapshotRequest.inputs) from the keywords it takes (Layer.input_from)
    return SnapshotRequest(Path(fs_root), branch=name, agent=agent, message=message, label=label,
                           ignore=tuple(ignore), allow_empty=allow_empty, layers=extra, switch=switch,
                           messages=trace.messages, effects=effects, env=_env(env_input.env),
                           no_redact=frozenset(no_redact), rewrite_effects=rewrite_reason(rewrite_effects))
