"""Looking at the page cache of a file, for tests of I/O that goes past it (dropping it:
``git_pf.store.directio.evict``), and damaging a stored file in place."""
from __future__ import annotations

import ctypes
import mmap
import os


def flip_byte(path, offset: int, mask: int = 0xFF) -> None:
    """XOR the byte at ``offset`` of ``path`` (read-only as the store leaves it) with ``mask``,
    in place, the rest of the file untouched."""
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)
        f.seek(offset)
        f.write(bytes([byte[0] ^ mask]))


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

