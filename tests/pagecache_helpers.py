"""Looking at the page cache of a file, for tests of I/O that goes past it (dropping it:
``git_pf.store.directio.evict``)."""
from __future__ import annotations

import ctypes
import mmap
import os


def resident_pages(path) -> int:
    """Pages of ``path`` now in the page cache (mincore over a private mapping of it)."""
    size = os.path.getsize(path)
    libc = ctypes.CDLL(None, use_errno=True)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)
        try:
            anchor = ctypes.c_char.from_buffer(m)
            vec = (ctypes.c_ubyte * (-(-size // mmap.PAGESIZE)))()
            rc = libc.mincore(ctypes.c_void_p(ctypes.addressof(anchor)), ctypes.c_size_t(size), vec)
            del anchor
            assert rc == 0, ctypes.get_errno()
            return sum(v & 1 for v in vec)
        finally:
            m.close()


def direct_io_works(where) -> bool:
    """Whether files under ``where`` can be opened with O_DIRECT (some filesystems refuse it)."""
    probe = where / "direct-probe"
    probe.write_bytes(b"")
    try:
        os.close(os.open(probe, os.O_WRONLY | getattr(os, "O_DIRECT", 0)))
        return hasattr(os, "O_DIRECT")
    except OSError:
        return False
    finally:
        probe.unlink()

