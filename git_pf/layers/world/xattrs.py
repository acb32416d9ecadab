"""Reading and writing extended attributes (``user.*`` for images), never following symlinks.

Uses the stdlib calls where the platform has them and the ``xattr`` package
elsewhere. Only the ``user.`` namespace is captured or restored.
"""
from __future__ import annotations

import errno
import os

_UNSUPPORTED = {errno.ENOTSUP, errno.EOPNOTSUPP, errno.EPERM} if hasattr(errno, "EOPNOTSUPP") else {errno.ENOTSUP}

if hasattr(os, "listxattr"):

    def _list(path: bytes) -> list[str]:
        return os.listxattr(path, follow_symlinks=False)

    def _get(path: bytes, name: str) -> bytes:
        return os.getxattr(path, name, follow_symlinks=False)

    def _set(path: bytes, name: str, value: bytes) -> None:
        os.setxattr(path, name, value, follow_symlinks=False)

else:  # pragma: no cover - non-Linux
    import xattr as _x

    def _list(path: bytes) -> list[str]:
        return list(_x.listxattr(path, symlink=True))

    def _get(path: bytes, name: str) -> bytes:
        return _x.getxattr(path, name, symlink=True)

    def _set(path: bytes, name: str, value: bytes) -> None:
        _x.setxattr(path, name, value, symlink=True)


def read_user_xattrs(path: bytes) -> dict[str, bytes]:
    """The ``user.*`` attributes of ``path`` (empty when the filesystem has none)."""
    return _read(path, "user.")


def read_all_xattrs(path: bytes) -> dict[str, bytes]:
    """Every attribute of ``path``, of any namespace the caller may read (empty when the
    filesystem has none): what a reused world directory is brought back to
    (``git_pf.executors.worlds``)."""
    return _read(path, "")


def _read(path: bytes, prefix: str) -> dict[str, bytes]:
    try:
        names = _list(path)
    except OSError as e:
        if e.errno in _UNSUPPORTED:
            return {}
        raise
    return {n: _get(path, n) for n in sorted(names) if n.startswith(prefix)}


def write_user_xattrs(path: bytes, attrs: dict[str, bytes]) -> None:
    for name, value in attrs.items():
        _set(path, name, value)
