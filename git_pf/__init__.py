"""git-pf: fork() for AI agents.

Snapshot an agent's live state (trace, world, effects, model, KV cache) into
one image stored as a git commit under ``refs/pf/``, fork it, merge it, push
it with plain git. ``Repo`` is the Python API (docs/python-api.md); the
``git-pf`` command is a thin layer over it. Importing this package never
imports torch, and imports nothing else until one of its names is used.
"""
from __future__ import annotations

__version__ = "0.1.0"

# Exported names and the module that defines each. They load on first use (PEP 562), so
# `import git_pf` stays cheap: the `git-pf` command imports this package on every call,
# and `git pf --version` or `-h` must not pay for pygit2.
_EXPORTS = {
    "Repo": "repo",
    "ImageInfo": "image.manifest",
    "Agent": "image.manifest",
    "tool": "runs.tools",
    **dict.fromkeys(["PfError", "UsageError", "UnknownRevision", "InputFormatError", "NotARepository", "DataError",
                     "CorruptObject", "MissingObject", "WriteFailed"], "core.errors"),
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:  # AttributeError lets `from git_pf import <submodule>` import the submodule
        raise AttributeError(f"module 'git_pf' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
