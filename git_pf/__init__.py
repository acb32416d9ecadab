"""git-pf: fork() for AI agents.

Snapshot an agent's live state (trace, world, effects, model, KV cache) into
one image stored as a git commit under ``refs/pf/``, fork it, merge it, push
it with plain git. ``Repo`` is the Python API (docs/python-api.md); the
``git-pf`` command is a thin layer over it. Importing this package never
imports torch.
"""
from __future__ import annotations

__version__ = "0.1.0"

from .errors import (  # noqa: E402
    CorruptObject, DataError, InputFormatError, MissingObject, NotARepository, PfError, UnknownRevision, UsageError,
    WriteFailed,
)
from .image import Agent, ImageInfo  # noqa: E402
from .repo import Repo  # noqa: E402

__all__ = ["Repo", "ImageInfo", "Agent", "PfError", "UsageError", "UnknownRevision", "InputFormatError",
           "NotARepository", "DataError", "CorruptObject", "MissingObject", "WriteFailed", "__version__"]
