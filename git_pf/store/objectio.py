"""Object files of the side store: reading, writing and syncing them.

Reads a whole object file (into this thread's ``directio`` buffer when it is
transient, past the page cache when it is large and cold), writes a frame
into a new file, makes files durable (one ``syncfs`` or an fsync each) and
runs a function a few items ahead of its caller on worker threads. It knows
files and buffers only: not object names, frames' content, chunking, images
or transport.
"""
from __future__ import annotations

import ctypes
import os
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Callable, Iterator

from ..core import cores
from . import directio

WORKERS = max(2, min(8, cores.usable()))
EARLY_WRITEBACK = 1 << 20  # frames this large start their writeback as soon as written in a batch
READ_AHEAD = 4  # items read_ahead computes ahead of its caller
MAP_MIN = 64 * 1024  # stored frames this large are mapped, not read, by ``frame``
REUSE_MAX = 16 << 20  # frames up to this size are read into a buffer their thread reuses


def syncfs(path: Path) -> bool:
    """Flush the whole filesystem holding ``path`` (Linux ``syncfs``); False where unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fd = os.open(path, os.O_RDONLY)
    except (OSError, AttributeError):
        return False
    try:
        return getattr(libc, "syncfs", None) is not None and libc.syncfs(fd) == 0
    finally:
        os.close(fd)


def sync_files(root: Path, paths: list[str]) -> None:
    """Make ``paths`` durable: one ``syncfs`` when the platform has it (for one file, its fsync:
    a ``syncfs`` would flush every other file's writes too), else an fsync each."""
    if not paths or (len(paths) > 1 and syncfs(root)):
        return
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def read_file(path: Path, transient: bool):
    """A whole object file. With ``transient`` a file of up to ``REUSE_MAX`` bytes is read
    into this thread's ``directio`` buffer (a view valid until the thread's next read: no new
    memory to zero and fault in per object), past the page cache when it is large and not
    cached there."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        size = os.fstat(fd).st_size
        if not transient:
            return read_fd(fd, size, bytearray(size))
        view = directio.read_uncached(fd, path, 0, size)
        if view is not None:
            return view
        out = memoryview(directio.buffer(size))[:size] if size <= REUSE_MAX else bytearray(size)
        return read_fd(fd, size, out)
    finally:
        os.close(fd)


def read_fd(fd: int, size: int, out):
    """Up to ``size`` bytes from the start of ``fd`` into ``out`` (a writable buffer of ``size``
    bytes); ``out`` itself, or its first bytes when the file is shorter."""
    view, got = memoryview(out), 0
    while got < size:
        n = os.preadv(fd, [view[got:]], got)
        if n == 0:
            break
        got += n
    return out if got == size else out[:got]


def read_ahead(fn: Callable, items: list) -> Iterator:
    """``fn(item)`` for each item, in order, computed ``READ_AHEAD`` items ahead of the
    caller on worker threads (``fn`` should release the GIL for most of its work)."""
    with ThreadPoolExecutor(WORKERS) as pool:
        ahead = deque(pool.submit(fn, item) for item in items[:READ_AHEAD])
        rest = iter(items[READ_AHEAD:])
        while ahead:
            result = ahead.popleft().result()
            nxt = next(rest, None)
            if nxt is not None:
                ahead.append(pool.submit(fn, nxt))
            yield result


def frame_writer(frame) -> Callable[[int, str], bool]:
    """A ``SideStore._write_atomic`` writer of a frame through the page cache; a large one's
    writeback may start as soon as it is written."""
    def write(fd: int, tmp: str) -> bool:
        directio.pwrite_all(fd, frame, 0)
        return len(frame) >= EARLY_WRITEBACK
    return write

