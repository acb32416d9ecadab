"""Choosing the object adapter of a remote from ``pf.remote.<name>.store`` (git | file | file:<dir>)."""
from __future__ import annotations

from ..errors import UsageError
from . import remotes
from .filestore import FileAdapter
from .gitstore import GitAdapter


def for_remote(repo, remote: remotes.Remote):
    setting = remotes.store_setting(repo, remote)
    if setting == "git":
        return GitAdapter(repo, remote)
    if setting == "file" or setting.startswith("file:"):
        return FileAdapter(remotes.file_root(repo, remote, setting))
    raise UsageError(f"pf.remote.{remote.name}.store: unknown adapter '{setting}' (use git, file or file:<dir>)")
