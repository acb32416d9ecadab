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

from ... import image as img
from . import attrs, procs
from .env import Env, redact


def write_world(snap) -> dict[str, dict]:
    """``world/fs`` and ``world/fs.attrs.jsonl`` from the capture; the fs part of ``layers.world``."""
    cap = snap.capture
    snap.edit.put_tree(img.WORLD_FS, cap.tree)
    snap.edit.put_file(img.WORLD_ATTRS, attrs.encode(cap.attrs))
    return {"world": {"files": cap.stats.files, "bytes": cap.stats.bytes, "pointers": cap.stats.pointers}}


def write_env(snap) -> dict[str, dict]:
    """``world/env.json`` (and ``world/procs.json`` when given); the env part of ``layers.world``."""
    req = snap.req
    env = redact(req.env, set(req.no_redact)) if req.env is not None else \
        snap.inherited(img.WORLD_ENV, Env.decode, Env())
    snap.edit.put_file(img.WORLD_ENV, env.encode())
    return {"world": {"env_vars": len(env.vars), "redacted": len(env.redacted)}, **snap.write_given(procs.NAME)}
