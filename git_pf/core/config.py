"""git-pf settings, read from ``git config`` under ``pf.*`` (docs/config.md).

Only reading and defaults live here; commands decide what to do with them.
"""
from __future__ import annotations

import os

import pygit2

from .errors import UsageError
from .limits import DEFAULT as DEFAULT_LIMITS, Limits

DEFAULT_LARGE_FILE_THRESHOLD = 1024 * 1024


def _size(repo: pygit2.Repository, key: str, default: int) -> int:
    """A size in bytes under ``key`` (git's k/m/g suffixes allowed), at least 1."""
    try:
        value = repo.config.get_int(key)
    except KeyError:
        return default
    except (ValueError, pygit2.GitError):
        raise UsageError(f"{key} must be a size in bytes (k/m/g suffixes allowed)") from None
    if value < 1:
        raise UsageError(f"{key} must be at least 1")
    return value


def get_size(repo: pygit2.Repository, key: str, default: int) -> int:
    """A size setting in bytes (git's k/m/g suffixes allowed, at least 1); ``default`` when unset."""
    return _size(repo, key, default)


def large_file_threshold(repo: pygit2.Repository) -> int:
    """``pf.largeFileThreshold`` in bytes (git's k/m/g suffixes allowed); default 1 MiB."""
    return _size(repo, "pf.largeFileThreshold", DEFAULT_LARGE_FILE_THRESHOLD)


def limits(repo: pygit2.Repository) -> Limits:
    """``pf.maxObjectSize``, ``pf.maxFrameSize``, ``pf.maxJsonLine`` and ``pf.maxBlobSize``: the bounds on reads
    of image data (docs/security.md, "Bounded reads"); defaults in ``limits.DEFAULT``."""
    return Limits(max_object=_size(repo, "pf.maxObjectSize", DEFAULT_LIMITS.max_object),
                  max_frame=_size(repo, "pf.maxFrameSize", DEFAULT_LIMITS.max_frame),
                  max_json_line=_size(repo, "pf.maxJsonLine", DEFAULT_LIMITS.max_json_line),
                  max_blob=_size(repo, "pf.maxBlobSize", DEFAULT_LIMITS.max_blob))


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
