"""Starting a file's writeback early (Linux ``sync_file_range(SYNC_FILE_RANGE_WRITE)``).

``start`` asks the kernel to begin writing a file's dirty pages now, without
waiting, so the disk works while the caller goes on computing: a later
``fsync``/``syncfs`` only waits for the tail, and a writer of large files is
not throttled by a pile of dirty pages. It never makes anything durable by
itself and is a no-op where the platform lacks it. Knows nothing of git,
packs or the side store.
"""
from __future__ import annotations

import ctypes

_SYNC_FILE_RANGE_WRITE = 2


def _libc():
    try:
        return ctypes.CDLL(None, use_errno=True)
    except (OSError, AttributeError):
        return None


_LIBC = _libc()
_SFR = getattr(_LIBC, "sync_file_range", None)
if _SFR is not None:
    _SFR.argtypes = [ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint]
    _SFR.restype = ctypes.c_int


def start(fd: int, offset: int = 0, nbytes: int = 0) -> None:
    """Start writeback of ``nbytes`` at ``offset`` of ``fd`` (0: to the end); never waits."""
    if _SFR is not None:
        _SFR(fd, offset, nbytes, _SYNC_FILE_RANGE_WRITE)
