"""FUSE requests of a git-pf mount: the View call each request makes.

Decodes each request's arguments (``protocol``), resolves its inodes to
paths (``inodes``), turns it into a ``View`` call and encodes the answer
with cache hints (``attrs``): long entry/attribute timeouts and
``keep_cache`` for the lower layer, which never changes under a mount. A
read-only mount answers ``open`` and ``opendir`` with ``ENOSYS``, after
which the kernel sends neither (nor ``release``) and passes file handle 0:
reads and listings are then served by inode; directory requests and the
read-ahead of a walk are in ``listing``. A read of a large file is answered
``Later``: decoded and sent by a reply thread while the loop serves the
next request, so the reads the kernel has in flight decode on every core. Every mutating handler runs to
completion, so a snapshot (which holds the session still) never sees half
an operation. Errors are ``OSError``; the session answers them. Reads the
image only through the view's lower layer, and changes the upper layer only
through the view and the descriptors the view hands out.
"""
from __future__ import annotations

import errno
import functools
import os
import stat
import time

from . import protocol as P
from .attrs import LOWER_TIMEOUT, Attributes, ns
from .inodes import Handle, Inodes, Kept, no
from .listing import Listing
from .lower import PointerReader
from .session import Later
from .upper import join
from .view import Node, View


def _name(body) -> bytes:
    """The one NUL-terminated name that ends a request."""
    return bytes(body[:-1])


class Operations(Attributes, Listing):
    def __init__(self, view: View):
        self.inodes = Inodes()
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, list | None] = {}  # fh -> listing of an open directory (--rw mounts)
        self.next_fh = 1
        self.uid, self.gid = os.geteuid(), os.getegid()
        self.prefill = None  # a Prefill, on read-only mounts once the session is up
        self.follow(view)

    def follow(self, view: View) -> None:
        """Serve ``view`` from now on (a snapshot switched the image under the upper layer)."""
        self.view = view
        self.readonly = view.upper is None
        self.readers = Kept()  # inode -> reader, read-only mounts
        self._new_walk()
        times = ns(view.lower.mtime_ns)
        self._lower_times = (times[0],) * 3 + (times[1],) * 3

    def handlers(self) -> dict:
        """opcode -> handler(nodeid, body) for the session."""
        return {
            P.LOOKUP: self.lookup, P.GETATTR: self.getattr, P.SETATTR: self.setattr, P.READLINK: self.readlink,
            P.SYMLINK: self.symlink, P.MKNOD: self.mknod, P.MKDIR: self.mkdir, P.UNLINK: self.unlink,
            P.RMDIR: self.rmdir, P.RENAME: self.rename, P.RENAME2: self.rename2, P.LINK: self.link,
            P.OPEN: self.open, P.READ: self.read, P.WRITE: self.write, P.STATFS: self.statfs,
            P.RELEASE: self.release, P.FSYNC: self.fsync, P.SETXATTR: self.setxattr, P.GETXATTR: self.getxattr,
            P.LISTXATTR: self.listxattr, P.REMOVEXATTR: self.removexattr, P.OPENDIR: self.opendir,
            P.READDIR: self.readdir, P.READDIRPLUS: self.readdirplus, P.RELEASEDIR: self.releasedir,
            P.FSYNCDIR: self.fsyncdir, P.CREATE: self.create, P.DESTROY: lambda nodeid, body: b"",
        }

    # -- helpers --------------------------------------------------------
    def _entry(self, rel: bytes) -> bytes:
        return self._entry_of(self.inodes.of(rel), self.view.need(rel))

    def _child(self, parent: int, name: bytes) -> bytes:
        return join(self.inodes.rel(parent), name)

    def _new_fh(self, handle) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = handle
        return fh

    def _fd(self, fh: int) -> int:
        h = self.handles.get(fh)
        if h is None or h.fd is None:
            raise no(errno.EBADF)
        return h.fd

    def open_paths(self) -> set[bytes]:
        """Relative paths of files open on the upper layer (kept across a snapshot)."""
        return {self.inodes.path[h.ino] for h in self.handles.values()
                if h.fd is not None and self.inodes.path.get(h.ino) is not None}

    # -- lookups --------------------------------------------------------
    def lookup(self, parent, body):
        rel = self._child(parent, _name(body))
        node = self.view.node(rel)
        if node is None:
            if self.readonly:  # cache the negative answer: nothing can appear
                return P.negative_entry(LOWER_TIMEOUT)
            raise no(errno.ENOENT)
        ino = self.inodes.of(rel)
        self.told.add(ino)
        return self._entry_of(ino, node)

    def getattr(self, inode, body):
        rel = self.inodes.path.get(inode)
        if rel is None:
            fd = next((h.fd for h in self.handles.values() if h.ino == inode and h.fd is not None), None)
            if fd is None:
                raise no(errno.ENOENT)
            return P.attr_out(*self._attrs(inode, Node(os.fstat(fd), None)))
        return P.attr_out(*self._attrs(inode, self.view.need(rel)))

    def readlink(self, inode, body):
        return self.view.readlink(self.inodes.rel(inode))

    def getxattr(self, inode, body):
        size = P.XATTR_IN.unpack_from(body)[0]
        value = self.view.getxattr(self.inodes.rel(inode), os.fsdecode(_name(body[P.XATTR_IN.size:])))
        return _sized(value, size)

    def listxattr(self, inode, body):
        size = P.XATTR_IN.unpack_from(body)[0]
        names = self.view.listxattr(self.inodes.rel(inode))
        return _sized(b"".join(os.fsencode(n) + b"\0" for n in names), size)

    def statfs(self, inode, body):
        root = self.view.upper.root if self.view.upper is not None else os.fsencode(self.view.lower.git.path)
        return P.statfs_out(os.statvfs(root))

    # -- files ----------------------------------------------------------
    def open(self, inode, body):
        if self.readonly:
            raise no(errno.ENOSYS)  # zero-message open: reads are served by inode, no release follows
        flags = P.OPEN_IN.unpack_from(body)[0]
        rel = self.inodes.rel(inode)
        node = self.view.need(rel)
        if flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC:
            return P.open_out(self._new_fh(Handle(inode, fd=self.view.open_fd(rel, flags))))
        if node.upper is not None:
            fd = os.open(self.view.upper.path(rel), os.O_RDONLY | os.O_CLOEXEC)
            return P.open_out(self._new_fh(Handle(inode, fd=fd)))
        reader = self.view.lower.reader(node.lower)
        return P.open_out(self._new_fh(Handle(inode, reader=reader)), keep_cache=True)

    def create(self, parent, body):
        flags, mode = P.CREATE_IN.unpack_from(body)[:2]
        rel = self._child(parent, _name(body[P.CREATE_IN.size:]))
        fd = self.view.create(rel, mode, flags)
        fh = self._new_fh(Handle(self.inodes.of(rel), fd=fd))
        return self._entry(rel) + P.open_out(fh)

    def read(self, inode, body):
        fh, off, size = P.READ_IN.unpack_from(body)
        if not fh:
            return self._read_lower(inode, off, size)
        h = self.handles[fh]
        if h.fd is not None:
            return os.pread(h.fd, size, off)
        return _read(h.reader, off, size)

    def _read_lower(self, inode: int, off: int, size: int):
        """A read-only mount's read, by inode: a small file read whole comes straight from
        its blob; anything else through a reader kept for the next read."""
        reader = self.readers.get_used(inode)
        if reader is None:
            lower = self.view.lower
            rel = self.inodes.rel(inode)
            entry = lower.get(rel)
            if entry is None or entry.is_dir:
                raise no(errno.ENOENT if entry is None else errno.EISDIR)
            if off == 0 and not entry.pointer and lower.size(entry) <= size:
                self._read_whole(inode, rel)
                return lower.content(entry)
            reader = self.readers.keep(inode, lower.reader(entry))
        return _read(reader, off, size)

    def write(self, inode, body):
        fh, off, size = P.WRITE_IN.unpack_from(body)
        n = os.pwrite(self._fd(fh), body[P.WRITE_IN_SIZE:P.WRITE_IN_SIZE + size], off)
        return P.WRITE_OUT.pack(n, 0)

    # no ``flush``: answered ENOSYS, after which the kernel stops sending one per close

    def release(self, inode, body):
        h = self.handles.pop(P.FH_IN.unpack_from(body)[0], None)
        if h is not None and h.fd is not None:
            os.close(h.fd)
        return b""

    def fsync(self, inode, body):
        fh, flags = P.FSYNC_IN.unpack_from(body)
        h = self.handles.get(fh)
        if h is not None and h.fd is not None:
            (os.fdatasync if flags & P.FSYNC_FDATASYNC else os.fsync)(h.fd)
        return b""

    def fsyncdir(self, inode, body):
        if self.view.upper is None:
            return b""
        rel = self.inodes.rel(inode)
        st = self.view.upper.lstat(rel)
        if st is not None and stat.S_ISDIR(st.st_mode):
            fd = os.open(self.view.upper.path(rel), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        return b""

    # -- changes --------------------------------------------------------
    def setattr(self, inode, body):
        (valid, _, fh, size, _, atime, mtime, _, atimensec, mtimensec, _, mode, _, uid, gid,
         _) = P.SETATTR_IN.unpack_from(body)
        h = self.handles.get(fh) if valid & P.FATTR_FH else None
        fd = h.fd if h is not None else None
        if self.inodes.path.get(inode) is None and fd is not None:  # unlinked but still open
            if valid & P.FATTR_SIZE:
                os.ftruncate(fd, size)
            if valid & P.FATTR_MODE:
                os.fchmod(fd, stat.S_IMODE(mode))
            return P.attr_out(*self._attrs(inode, Node(os.fstat(fd), None)))
        rel = self.inodes.rel(inode)
        self.view.setattr(
            rel, fd,
            mode=mode if valid & P.FATTR_MODE else None,
            uid=uid if valid & P.FATTR_UID else None,
            gid=gid if valid & P.FATTR_GID else None,
            size=size if valid & P.FATTR_SIZE else None,
            atime_ns=_set_time(valid, P.FATTR_ATIME, P.FATTR_ATIME_NOW, atime, atimensec),
            mtime_ns=_set_time(valid, P.FATTR_MTIME, P.FATTR_MTIME_NOW, mtime, mtimensec))
        return P.attr_out(*self._attrs(inode, self.view.need(rel)))

    def mkdir(self, parent, body):
        mode = P.MKDIR_IN.unpack_from(body)[0]
        rel = self._child(parent, _name(body[P.MKDIR_IN.size:]))
        self.view.mkdir(rel, mode)
        return self._entry(rel)

    def symlink(self, parent, body):
        name, target = P.names(body, 2)
        rel = self._child(parent, name)
        self.view.symlink(rel, target)
        return self._entry(rel)

    def mknod(self, parent, body):
        mode, rdev = P.MKNOD_IN.unpack_from(body)[:2]
        rel = self._child(parent, _name(body[P.MKNOD_IN.size:]))
        self.view.mknod(rel, mode, rdev)
        return self._entry(rel)

    def unlink(self, parent, body):
        rel = self._child(parent, _name(body))
        self.view.unlink(rel)
        self.inodes.detach(rel)
        return b""

    def rmdir(self, parent, body):
        rel = self._child(parent, _name(body))
        self.view.rmdir(rel)
        self.inodes.detach(rel)
        return b""

    def rename(self, parent, body):
        return self._rename(parent, P.RENAME_IN.unpack_from(body)[0], 0, body[P.RENAME_IN.size:])

    def rename2(self, parent, body):
        newdir, flags, _ = P.RENAME2_IN.unpack_from(body)
        return self._rename(parent, newdir, flags, body[P.RENAME2_IN.size:])

    def _rename(self, parent_old, parent_new, flags, names):
        if flags & P.RENAME_EXCHANGE:
            raise no(errno.EINVAL)
        name_old, name_new = P.names(names, 2)
        old, new = self._child(parent_old, name_old), self._child(parent_new, name_new)
        self.view.rename(old, new, bool(flags & P.RENAME_NOREPLACE))
        self.inodes.move(old, new)
        return b""

    def link(self, inode, body):
        raise OSError(errno.EPERM, "hard links are not supported")

    def setxattr(self, inode, body):
        size = P.XATTR_IN.unpack_from(body)[0]
        name, _, rest = bytes(body[P.XATTR_IN.size:]).partition(b"\0")
        self.view.setxattr(self.inodes.rel(inode), os.fsdecode(name), rest[:size])
        return b""

    def removexattr(self, inode, body):
        self.view.removexattr(self.inodes.rel(inode), os.fsdecode(_name(body)))
        return b""


def _read(reader, off: int, size: int):
    """A read of a lower file; a large file's is decoded and sent on a reply thread (``Later``),
    so the reads the kernel has in flight decode on every core while the loop serves on."""
    if isinstance(reader, PointerReader):
        reader.plan(off, size)
        return Later(functools.partial(reader.pieces, off, size))
    return reader.read(off, size)


def _sized(value: bytes, size: int) -> bytes:
    """An xattr answer: the length alone when asked with size 0, ERANGE when it does not fit."""
    if size == 0:
        return P.XATTR_SIZE_OUT.pack(len(value), 0)
    if len(value) > size:
        raise no(errno.ERANGE)
    return value


def _set_time(valid: int, field: int, now: int, sec: int, nsec: int) -> int | None:
    if not valid & field:
        return None
    return time.time_ns() if valid & now else sec * 1_000_000_000 + nsec
