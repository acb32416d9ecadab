"""The FUSE kernel protocol as a mount daemon speaks it (linux/fuse.h, version 7.31).

Opcodes, the request and reply headers, the argument layouts the daemon
reads and the reply layouts it writes, and the INIT negotiation. Pure
encoding and decoding of bytes (and the one write of a notification): no
file system logic.
"""
from __future__ import annotations

import os
import struct

MAJOR, MINOR = 7, 31  # the layouts below are those of 7.31 (all fields present since 7.23)

LOOKUP, FORGET, GETATTR, SETATTR, READLINK, SYMLINK = 1, 2, 3, 4, 5, 6
MKNOD, MKDIR, UNLINK, RMDIR, RENAME, LINK, OPEN, READ, WRITE = 8, 9, 10, 11, 12, 13, 14, 15, 16
STATFS, RELEASE, FSYNC, SETXATTR, GETXATTR, LISTXATTR, REMOVEXATTR, FLUSH = 17, 18, 20, 21, 22, 23, 24, 25
INIT, OPENDIR, READDIR, RELEASEDIR, FSYNCDIR, ACCESS, CREATE, INTERRUPT = 26, 27, 28, 29, 30, 34, 35, 36
DESTROY, IOCTL, BATCH_FORGET, READDIRPLUS, RENAME2 = 38, 39, 42, 44, 45
NO_REPLY = frozenset({FORGET, BATCH_FORGET, INTERRUPT})  # the kernel expects no answer to these
NOTIFY_STORE = 4  # a notification (unique 0, the code in the error field): data into the page cache

# INIT flags the daemon asks for (each only when the kernel offers it)
ASYNC_READ, ATOMIC_O_TRUNC, BIG_WRITES = 1 << 0, 1 << 3, 1 << 5
AUTO_INVAL_DATA, DO_READDIRPLUS, READDIRPLUS_AUTO = 1 << 12, 1 << 13, 1 << 14
PARALLEL_DIROPS, MAX_PAGES = 1 << 18, 1 << 22
WANTED = (ASYNC_READ | ATOMIC_O_TRUNC | BIG_WRITES | AUTO_INVAL_DATA | DO_READDIRPLUS | READDIRPLUS_AUTO
          | PARALLEL_DIROPS | MAX_PAGES)

FOPEN_KEEP_CACHE = 1 << 1
FATTR_MODE, FATTR_UID, FATTR_GID, FATTR_SIZE = 1 << 0, 1 << 1, 1 << 2, 1 << 3
FATTR_ATIME, FATTR_MTIME, FATTR_FH, FATTR_ATIME_NOW, FATTR_MTIME_NOW = 1 << 4, 1 << 5, 1 << 6, 1 << 7, 1 << 8
RENAME_NOREPLACE, RENAME_EXCHANGE = 1 << 0, 1 << 1
FSYNC_FDATASYNC = 1 << 0
ROOT_ID = 1
DOTS = (b".", b"..")  # listed first in every directory, as every filesystem does

IN_HEADER = struct.Struct("<IIQQIIIHH")  # len, opcode, unique, nodeid, uid, gid, pid, extlen, pad
OUT_HEADER = struct.Struct("<IiQ")  # len, error (negative errno), unique
_ATTR = "QQQqqqIIIIIIIIII"  # ino size blocks atime mtime ctime (signed) *nsec(3) mode nlink uid gid rdev blksize flags
ENTRY_OUT = struct.Struct("<QQQQII" + _ATTR)  # nodeid generation entry_valid attr_valid *_nsec, attr
ATTR_OUT = struct.Struct("<QII" + _ATTR)  # attr_valid attr_valid_nsec dummy, attr
OPEN_OUT = struct.Struct("<QII")  # fh open_flags padding
WRITE_OUT = struct.Struct("<II")
XATTR_SIZE_OUT = struct.Struct("<II")
STATFS_OUT = struct.Struct("<QQQQQIII" + "I" * 7)  # blocks bfree bavail files ffree bsize namelen frsize pad spare
DIRENT = struct.Struct("<QQII")  # ino off namelen type, then the name padded to 8 bytes
DIRENTPLUS = struct.Struct(ENTRY_OUT.format + "QQII")  # entry_out, then a dirent
STORE_OUT = struct.Struct("<QQII")  # nodeid offset size padding, then the data
INIT_IN = struct.Struct("<IIII")  # major minor max_readahead flags
INIT_OUT = struct.Struct("<IIIIHHIIHHI" + "I" * 7)

READ_IN = struct.Struct("<QQI")  # fh offset size (also readdir)
WRITE_IN = struct.Struct("<QQI")  # fh offset size; data follows the 40-byte record
WRITE_IN_SIZE = 40
FH_IN = struct.Struct("<Q")  # release, releasedir, flush: the fh leads the record
FSYNC_IN = struct.Struct("<QI")
SETATTR_IN = struct.Struct("<IIQQQQQQIIIIIIII")
OPEN_IN = struct.Struct("<II")
CREATE_IN = struct.Struct("<IIII")  # flags mode umask open_flags
MKNOD_IN = struct.Struct("<IIII")  # mode rdev umask padding
MKDIR_IN = struct.Struct("<II")  # mode umask
RENAME_IN = struct.Struct("<Q")
RENAME2_IN = struct.Struct("<QII")
XATTR_IN = struct.Struct("<II")  # size, flags (setxattr) / padding (getxattr, listxattr)


def valid(seconds: float) -> tuple[int, int]:
    """A cache timeout as the (seconds, nanoseconds) pair replies carry."""
    whole = int(seconds)
    return whole, int((seconds - whole) * 1e9)


def names(body, count: int) -> list[bytes]:
    """The first ``count`` NUL-terminated strings of a request body."""
    return bytes(body).split(b"\0", count)[:count]


def entry_out(entry_valid: tuple[int, int], attr_valid: tuple[int, int], attr: tuple) -> bytes:
    """The answer naming a node (its id is the attr's inode number)."""
    return ENTRY_OUT.pack(attr[0], 0, entry_valid[0], attr_valid[0], entry_valid[1], attr_valid[1], *attr)


def negative_entry(entry_valid: tuple[int, int]) -> bytes:
    """A cached "no such entry" (node id 0): the kernel remembers the miss for ``entry_valid``."""
    return ENTRY_OUT.pack(0, 0, entry_valid[0], 0, entry_valid[1], 0, *(0,) * 16)


def attr_out(attr_valid: tuple[int, int], attr: tuple) -> bytes:
    return ATTR_OUT.pack(attr_valid[0], attr_valid[1], 0, *attr)


def open_out(fh: int, keep_cache: bool = False) -> bytes:
    return OPEN_OUT.pack(fh, FOPEN_KEEP_CACHE if keep_cache else 0, 0)


def dirents(listing: list, start: int, size: int, plus: bool, entry_valid: tuple[int, int]) -> tuple[memoryview, int]:
    """Readdir (or readdirplus) records of ``listing[start:]`` ([(name, attr_valid, attr)]) that fit
    in ``size`` bytes, and the index after the last one; each record's offset is where the
    listing continues after it."""
    out = bytearray(size)  # zeroed: the padding of each record
    fixed, head = (DIRENTPLUS.size, DIRENTPLUS.pack_into) if plus else (DIRENT.size, DIRENT.pack_into)
    ev, evn = entry_valid
    pos, i = 0, start
    while i < len(listing):
        name, (av, avn), attr = listing[i]
        end = pos + fixed + len(name)
        if end > size:
            break
        kind = (attr[9] & 0o170000) >> 12
        if plus:  # '.' and '..' carry node id 0: the kernel looks them up by itself, counting no lookup
            head(out, pos, 0 if name in DOTS else attr[0], 0, ev, av, evn, avn, *attr, attr[0], i + 1, len(name), kind)
        else:
            head(out, pos, attr[0], i + 1, len(name), kind)
        out[pos + fixed:end] = name
        pos = (end + 7) & ~7
        i += 1
    return memoryview(out)[:min(pos, size)], i


def statfs_out(sv) -> bytes:
    return STATFS_OUT.pack(sv.f_blocks, sv.f_bfree, sv.f_bavail, sv.f_files, sv.f_ffree, sv.f_bsize, 255,
                           sv.f_frsize, 0, *(0,) * 6)


def store(fd: int, nodeid: int, data: bytes, offset: int = 0) -> None:
    """Put ``data`` into the kernel's page cache of ``nodeid`` at ``offset`` (FUSE_NOTIFY_STORE)."""
    size = OUT_HEADER.size + STORE_OUT.size + len(data)
    os.writev(fd, [OUT_HEADER.pack(size, NOTIFY_STORE, 0), STORE_OUT.pack(nodeid, offset, len(data), 0), data])


def init_reply(body, max_write: int, max_background: int) -> tuple[bytes, int]:
    """(reply, agreed flags) to the kernel's INIT; raises ValueError on a protocol we do not speak."""
    major, minor, max_readahead, offered = INIT_IN.unpack_from(body)
    if major != MAJOR or minor < 23:
        raise ValueError(f"kernel FUSE protocol {major}.{minor} is not supported (need 7.23 or later)")
    flags = offered & WANTED
    pages = max_write // 4096
    reply = INIT_OUT.pack(MAJOR, min(minor, MINOR), max_readahead, flags, max_background,
                          max_background * 3 // 4, max_write, 1, pages, 0, 0, *(0,) * 7)
    return reply, flags
