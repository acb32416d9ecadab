"""git-pf settings, read from ``git config`` under ``pf.*`` (docs/config.md).

Only reading and defaults live here; commands decide what to do with them.
"""
from __future__ import annotations

import os

import pygit2

from .errors import UsageError

DEFAULT_LARGE_FILE_THRESHOLD = 1024 * 1024


def large_file_threshold(repo: pygit2.Repository) -> int:
    """``pf.largeFileThreshold`` in bytes (git's k/m/g suffixes allowed); default 1 MiB."""
    try:
        value = repo.config.get_int("pf.largeFileThreshold")
    except KeyError:
        return DEFAULT_LARGE_FILE_THRESHOLD
    except (ValueError, pygit2.GitError):
        raise UsageError("pf.largeFileThreshold must be a size in bytes (k/m/g suffixes allowed)") from None
    if value < 1:
        raise UsageError("pf.largeFileThreshold must be at least 1")
    return value


def rehash_reads(repo: pygit2.Repository) -> bool:
    """``pf.rehashReads``: re-hash every side-store read with sha256 (default false: a frame
    in the repository's own store is checked by its content checksum)."""
    try:
        return repo.config.get_bool("pf.rehashReads")
    except KeyError:
        return False
    except (ValueError, pygit2.GitError):
        raise UsageError("pf.rehashReads must be a boolean (true/false)") from None


def get_str(repo: pygit2.Repository, key: str) -> str | None:
    try:
        return repo.config[key]
    except KeyError:
        return None


def signature(repo: pygit2.Repository) -> pygit2.Signature:
    """Who writes images, as git decides it: ``GIT_COMMITTER_NAME`` / ``GIT_COMMITTER_EMAIL``,
    else ``user.name`` / ``user.email``, else a fixed git-pf identity."""
    name, email = os.environ.get("GIT_COMMITTER_NAME"), os.environ.get("GIT_COMMITTER_EMAIL")
    if not (name and email):
        name = name or get_str(repo, "user.name")
        email = email or get_str(repo, "user.email")
    return pygit2.Signature(name or "git-pf", email or "git-pf@localhost")
