"""What a snapshot writes of the world layers (``Layer.input``): the captured tree and its
attrs (``world``), the environment and the process table (``env``).

The world is captured before any layer is written (the snapshot's ``WorldSource``);
here its tree and ``fs.attrs.jsonl`` go into the image. The environment given is
redacted unless a key is kept (``--no-redact``); one not given is the parent's, read
and written again (an empty one when the parent has none). A process table given
(``ProcsInput``) replaces the parent's; one not given stays as it is. Writes through
the snapshot's ``TreeEdit``; moves no refs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import manifest as img
from . import attrs, procs
from .env import Env, redact


@dataclass(frozen=True)
class EnvInput:
    """The env layer: the environment (an ``Env`` or a flat dict of variables) and/or the process
    table (as ``procs.capture`` or ``procs.read_input`` give it)."""

    env: Env | dict | None = None
    procs: dict | None = None


def env_from_flags(flags) -> EnvInput | None:
    """``--env`` (a JSON file) or ``--capture-env``, and ``--procs`` (a JSON file) or ``--capture-procs PID``."""
    from . import env as env_mod

    env = env_mod.from_file(flags["env"]) if flags.get("env") is not None else \
        env_mod.from_process() if flags.get("capture_env") else None
    table = procs.read_input(flags["procs"]) if flags.get("procs") is not None else \
        procs.capture(flags["capture_procs"]) if flags.get("capture_procs") is not None else None
    return None if env is None and table is None else EnvInput(env, table)


@dataclass(frozen=True)
class EnvGiven:
    """The env layer's input: the environment given (None: the parent's) and the keys kept unredacted."""

    env: Env | None = None
    no_redact: frozenset[str] = frozenset()

    @classmethod
    def from_keywords(cls, keywords: dict) -> "EnvGiven | None":
        """From ``SnapshotRequest(env=..., no_redact=...)``; None when neither is given."""
        if keywords.get("env") is None and not keywords.get("no_redact"):
            return None
        return cls(keywords.get("env"), frozenset(keywords.get("no_redact") or ()))


def fs_summary(stats) -> dict:
    """The fs part of the manifest's ``world`` entry, from a capture's stats."""
    return {"files": stats.files, "bytes": stats.bytes, "pointers": stats.pointers}


def write_world(snap) -> dict[str, dict]:
    """``world/fs`` and ``world/fs.attrs.jsonl`` from the capture; the fs part of ``layers.world``."""
    cap = snap.capture
    snap.edit.put_tree(img.WORLD_FS, cap.tree)
    snap.edit.put_file(img.WORLD_ATTRS, attrs.encode(cap.attrs))
    return {"world": fs_summary(cap.stats)}


def write_env(snap) -> dict[str, dict]:
    """``world/env.json`` (and ``world/procs.json`` when given); the env part of ``layers.world``."""
    given = snap.given("env") or EnvGiven()
    env = redact(given.env, set(given.no_redact)) if given.env is not None else \
        snap.inherited(img.WORLD_ENV, Env.decode, Env())
    snap.edit.put_file(img.WORLD_ENV, env.encode())
    return {"world": {"env_vars": len(env.vars), "redacted": len(env.redacted)}, **snap.write_given(procs.NAME)}
