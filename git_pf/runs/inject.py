"""The environment of a recorded, replayed or run-on child (docs/record.md, "Draws").

``child_env`` adds the run's mode, channel and replay file to a base environment and, unless told
not to, puts the hook directory (its ``sitecustomize``) first on ``PYTHONPATH`` so a Python child
records or replays its draws without code changes. Builds a dict; starts nothing and touches no
file.
"""
from __future__ import annotations

import os
from pathlib import Path

from ..core.errors import UsageError

MODES = ("record", "replay", "run")
HOOK_DIR = Path(__file__).resolve().parent / "hook"
RUN_VARS = ("GIT_PF_MODE", "GIT_PF_CHANNEL", "GIT_PF_REPLAY", "GIT_PF_OWNER", "GIT_PF_PARENT")


def child_env(base: dict[str, str], *, mode: str, channel: Path, replay_file: Path | None,
              inject: bool = True) -> dict[str, str]:
    """``base`` plus ``GIT_PF_MODE``, ``GIT_PF_CHANNEL``, ``GIT_PF_PARENT`` (this process: the
    agent is its child), ``GIT_PF_REPLAY`` (when given) and, with
    ``inject``, the hook directory first on ``PYTHONPATH`` (the hook chains to any other
    ``sitecustomize`` further on the path). A run's variables in ``base`` are replaced, never
    inherited: a run started inside another run is a run of its own."""
    if mode not in MODES:
        raise UsageError(f"the run mode must be one of {'|'.join(MODES)}, not {mode!r}")
    env = {k: v for k, v in base.items() if k not in RUN_VARS}
    env["GIT_PF_MODE"] = mode
    env["GIT_PF_CHANNEL"] = str(channel)
    env["GIT_PF_PARENT"] = str(os.getpid())  # the hook records only in the process started by this one
    if replay_file is not None:
        env["GIT_PF_REPLAY"] = str(replay_file)
    if inject:
        hook = str(HOOK_DIR)
        rest = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != hook]
        env["PYTHONPATH"] = os.pathsep.join([hook, *rest])
    return env
