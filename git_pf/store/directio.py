"""Bulk file I/O past the page cache (Linux ``O_DIRECT``), with buffered fallbacks.

For data written once and made durable at once (a pushed pack, KV pages) or
read once (a pack a clone just linked in), going past the page cache saves
taking a page-cache page per 4 KiB; on a virtual machine, taking pages the
host has not backed yet is most of the CPU time of a large buffered write or
cold read. ``O_DIRECT`` wants the offset, the length and the memory aligned,
so data goes through a page-aligned buffer kept per thread, and a last
partial block goes through an ordinary descriptor. Where the platform or the
filesystem refuses ``O_DIRECT``, or ``GIT_PF_NO_DIRECT_IO`` is set, everything
here falls back to (or tells the caller to use) buffered I/O; the bytes are
the same either way. Knows nothing of git, packs or the side store.
"""
from __future__ import annotations

import ctypes
import mmap
import os
import threading

ALIGN = 4096  # offsets, lengths and memory of O_DIRECT transfers are multiples of this
MIN_BYTES = 64 * 1024  # smaller transfers are not worth the detour
_O_DIRECT = getattr(os, "O_DIRECT", 0)
_local = threading.local()


def enabled() -> bool:
    return bool(_O_DIRECT) and not os.environ.get("GIT_PF_NO_DIRECT_IO")


def buffer(nbytes: int) -> mmap.mmap:
    """This thread's page-aligned scratch buffer, grown to at least ``nbytes`` (a power of two,
    1 MiB or more, so that sizes a little apart do not remap it); its contents last until the
    thread's next call."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < nbytes:
        if buf is not None:
            release(buf)
        buf = _local.buf = mmap.mmap(-1, max(1 << max(0, nbytes - 1).bit_length(), 1 << 20))  # a power of two
    return buf


def release(buf: mmap.mmap) -> None:
    """Unmap ``buf`` now, or, while a view of it is still alive (an exception's traceback can
    hold one), when the last reference goes."""
    try:
        buf.close()
    except BufferError:
        pass


def open_direct(path, flags: int) -> int | None:
    """``path`` opened with ``flags | O_DIRECT``; None where that is refused or turned off."""
    if not enabled():
        return None
    try:
        return os.open(path, flags | _O_DIRECT | os.O_CLOEXEC)
    except OSError:
        return None


def pwrite_all(fd: int, view, at: int) -> None:
    view = memoryview(view)
    while len(view):
        done = os.pwrite(fd, view, at)
        view, at = view[done:], at + done


def write_new_from_buffer(fd: int, path, nbytes: int) -> None:
    """Write the first ``nbytes`` of this thread's buffer, which the caller has filled
    (``buffer(n)`` with ``n >= nbytes``), at offset 0 of the new, empty file ``fd`` (opened on
    ``path``): the aligned part past the page cache when possible, straight from the buffer
    (no copy), the rest through ``fd``."""
    buf = getattr(_local, "buf", None)
    if buf is None or len(buf) < nbytes:
        raise ValueError(f"this thread's buffer holds fewer than {nbytes} bytes")
    data = memoryview(buf)[:nbytes]
    aligned = nbytes // ALIGN * ALIGN if nbytes >= MIN_BYTES else 0
    direct = open_direct(path, os.O_WRONLY) if aligned else None
    if direct is None:
        pwrite_all(fd, data, 0)
        return
    try:
        pwrite_all(direct, data[:aligned], 0)
    except OSError:
        os.close(direct)
        pwrite_all(fd, data, 0)  # refused after all (some filesystems only say so on write)
        return
    os.close(direct)
    pwrite_all(fd, data[aligned:], aligned)


def evict(path) -> None:
    """Make ``path`` durable and drop its pages from the page cache, so the next read comes
    from the disk (benchmarks and tests of cold reads use it)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def cached(fd: int, pos: int) -> bool:
    """Whether the page at ``pos`` of ``fd`` is in the page cache (True where that cannot be
    asked). Ask about a page a header read has not just brought in.

    Asked with ``mincore`` on a one-page mapping, which reads nothing: a read with
    ``RWF_NOWAIT`` also answers, but starts readahead of the page it asks about, so the
    next reader of the file found it cached and read the whole file through the cache."""
    if not enabled() or _MINCORE is None:
        return True
    try:
        view = mmap.mmap(fd, mmap.PAGESIZE, access=mmap.ACCESS_COPY, offset=pos // mmap.PAGESIZE * mmap.PAGESIZE)
    except (OSError, ValueError):
        return True
    try:
        anchor = ctypes.c_char.from_buffer(view)
        vec = ctypes.c_ubyte(1)
        rc = _MINCORE(ctypes.addressof(anchor), mmap.PAGESIZE, ctypes.byref(vec))
        del anchor
        return rc != 0 or bool(vec.value & 1)
    finally:
        view.close()


def _mincore():
    try:
        fn = ctypes.CDLL(None, use_errno=True).mincore
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    fn.restype = ctypes.c_int
    return fn


_MINCORE = _mincore()


def read_uncached(fd: int, path, start: int, nbytes: int) -> memoryview | None:
    """Bytes [start, start + nbytes) of the file ``fd`` (opened on ``path``) read past the page
    cache into this thread's buffer (valid until the thread's next call), when they are large
    enough and not cached (asked about their middle page); None means "read them as usual"."""
    if nbytes < MIN_BYTES or cached(fd, start + nbytes // 2):
        return None
    direct = open_direct(path, os.O_RDONLY)
    if direct is None:
        return None
    try:
        return read_span(direct, start, nbytes)
    finally:
        os.close(direct)


def read_span(direct: int, start: int, nbytes: int) -> memoryview | None:
    """Bytes [start, start + nbytes) read through the ``O_DIRECT`` descriptor ``direct`` into
    this thread's buffer (valid until the thread's next call); None when that fails."""
    lo, hi = start // ALIGN * ALIGN, -(-(start + nbytes) // ALIGN) * ALIGN
    buf = buffer(hi - lo)
    try:
        got = os.preadv(direct, [memoryview(buf)[: hi - lo]], lo)
    except OSError:
        return None
    if got < start + nbytes - lo:
        return None
    return memoryview(buf)[start - lo : start - lo + nbytes]
