"""The pyfuse3 ``Operations`` of a git-pf mount: inodes, handles and errno mapping.

Maps FUSE inodes to relative paths (stable for the life of the mount, moved
on rename), turns each request into a ``View`` call, and answers with
attributes and cache hints: long entry/attribute timeouts and
``keep_cache`` for the lower layer, which never changes under a mount.
Every mutating handler runs to completion without yielding, so a snapshot
(which pauses the event loop) never sees half an operation. A damaged or
missing object is EIO plus a log line, never a hang.
"""
from __future__ import annotations

import errno
import functools
import logging
import os
import stat

import pyfuse3

from git_pf.errors import PfError

from .upper import join
from .view import Node, View

log = logging.getLogger("git_pf.fuse")

LOWER_TIMEOUT = 86400.0  # the lower layer never changes under a mount
UPPER_ATTR_TIMEOUT = 1.0  # all changes pass through the kernel, which invalidates on write


def _fuse(fn):
    """Turn OSError into its errno and anything else into EIO plus a log line."""

    @functools.wraps(fn)
    async def wrapper(self, *args):
        try:
            return fn(self, *args)
        except pyfuse3.FUSEError:
            raise
        except OSError as e:
            raise pyfuse3.FUSEError(e.errno or errno.EIO) from None
        except PfError as e:
            log.error("%s: %s", fn.__name__, e.message)
            raise pyfuse3.FUSEError(errno.EIO) from None
        except Exception as e:  # a bug or damaged data: the caller sees EIO, the log says why
            log.exception("%s failed: %s", fn.__name__, e)
            raise pyfuse3.FUSEError(errno.EIO) from None

    return wrapper


class Inodes:
    """inode <-> relative path; an unlinked inode keeps its number but loses its path."""

    def __init__(self):
        self.path: dict[int, bytes | None] = {pyfuse3.ROOT_INODE: b""}
        self.ino: dict[bytes, int] = {b"": pyfuse3.ROOT_INODE}
        self.next = pyfuse3.ROOT_INODE + 1

    def of(self, rel: bytes) -> int:
        ino = self.ino.get(rel)
        if ino is None:
            ino = self.ino[rel] = self.next
            self.path[ino] = rel
            self.next += 1
        return ino

    def rel(self, ino: int) -> bytes:
        rel = self.path.get(ino)
        if rel is None:
            raise OSError(errno.ENOENT, "stale inode")
        return rel

    def detach(self, rel: bytes) -> None:
        ino = self.ino.pop(rel, None)
        if ino is not None:
            self.path[ino] = None

    def move(self, old: bytes, new: bytes) -> None:
        self.detach(new)
        prefix = new + b"/"
        for key in [k for k in self.ino if k.startswith(prefix)]:
            self.detach(key)
        prefix = old + b"/"
        for key in [k for k in self.ino if k == old or k.startswith(prefix)]:
            ino = self.ino.pop(key)
            moved = new + key[len(old):]
            self.ino[moved] = ino
            self.path[ino] = moved


class Handle:
    def __init__(self, ino: int, fd: int | None = None, reader=None):
        self.ino, self.fd, self.reader = ino, fd, reader


class Operations(pyfuse3.Operations):
    enable_writeback_cache = False

    def __init__(self, view: View):
        super().__init__()
        self.view = view
        self.inodes = Inodes()
        self.handles: dict[int, Handle] = {}
        self.dirs: dict[int, list | None] = {}
        self.dir_ino: dict[int, int] = {}
        self.next_fh = 1
        self.uid, self.gid = os.geteuid(), os.getegid()
        self.readonly = view.upper is None

    # -- helpers --------------------------------------------------------
    def _attrs(self, ino: int, node: Node) -> pyfuse3.EntryAttributes:
        a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.entry_timeout = LOWER_TIMEOUT
        st = node.upper
        if st is not None:
            a.attr_timeout = UPPER_ATTR_TIMEOUT
            a.st_mode, a.st_uid, a.st_gid, a.st_rdev = st.st_mode, st.st_uid, st.st_gid, st.st_rdev
            a.st_nlink = 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink
            a.st_size, a.st_blocks, a.st_blksize = st.st_size, st.st_blocks, 4096
            a.st_atime_ns, a.st_mtime_ns, a.st_ctime_ns = st.st_atime_ns, st.st_mtime_ns, st.st_ctime_ns
            return a
        e = node.lower
        a.attr_timeout = LOWER_TIMEOUT
        a.st_mode, a.st_nlink, a.st_uid, a.st_gid = e.mode, 1, self.uid, self.gid
        size = len(self.view.lower.readlink(e)) if stat.S_ISLNK(e.mode) else self.view.lower.size(e)
        a.st_size, a.st_blocks, a.st_blksize = size, (size + 511) // 512, 128 * 1024
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = self.view.lower.mtime_ns
        return a

    def _entry(self, rel: bytes) -> pyfuse3.EntryAttributes:
        return self._attrs(self.inodes.of(rel), self.view.need(rel))

    def _child(self, parent: int, name: bytes) -> bytes:
        return join(self.inodes.rel(parent), name)

    def _new_fh(self, handle) -> int:
        fh = self.next_fh
        self.next_fh += 1
        self.handles[fh] = handle
        return fh

    def open_paths(self) -> set[bytes]:
        """Relative paths of files open on the upper layer (kept across a snapshot)."""
        return {self.inodes.path[h.ino] for h in self.handles.values()
                if h.fd is not None and self.inodes.path.get(h.ino) is not None}

    # -- lookups --------------------------------------------------------
    @_fuse
    def lookup(self, parent_inode, name, ctx=None):
        rel = self._child(parent_inode, name)
        node = self.view.node(rel)
        if node is None:
            if self.readonly:  # cache the negative answer: nothing can appear
                a = pyfuse3.EntryAttributes()
                a.st_ino, a.entry_timeout = 0, LOWER_TIMEOUT
                return a
            raise OSError(errno.ENOENT, "")
        return self._attrs(self.inodes.of(rel), node)

    @_fuse
    def getattr(self, inode, ctx=None):
        rel = self.inodes.path.get(inode)
        if rel is None:
            fd = next((h.fd for h in self.handles.values() if h.ino == inode and h.fd is not None), None)
            if fd is None:
                raise OSError(errno.ENOENT, "")
            return self._attrs(inode, Node(os.fstat(fd), None))
        return self._attrs(inode, self.view.need(rel))

    async def forget(self, inode_list):
        pass  # inode numbers stay bound to their paths for the life of the mount

    @_fuse
    def readlink(self, inode, ctx):
        return self.view.readlink(self.inodes.rel(inode))

    @_fuse
    def opendir(self, inode, ctx):
        self.inodes.rel(inode)
        fh = self.next_fh
        self.next_fh += 1
        self.dirs[fh] = None
        self.dir_ino[fh] = inode
        return fh

    @_fuse
    def readdir(self, fh, start_id, token):
        listing = self.dirs.get(fh)
        if listing is None or start_id == 0:  # first call, or rewinddir: list afresh
            rel = self.inodes.rel(self.dir_ino[fh])
            listing = self.dirs[fh] = [
                (name, self._attrs(self.inodes.of(join(rel, name)), node))
                for name, node in sorted(self.view.listdir(rel).items())]
        for i in range(start_id, len(listing)):
            name, attrs = listing[i]
            if not pyfuse3.readdir_reply(token, name, attrs, i + 1):
                break

    @_fuse
    def releasedir(self, fh):
        self.dirs.pop(fh, None)
        self.dir_ino.pop(fh, None)

    @_fuse
    def getxattr(self, inode, name, ctx):
        try:
            return self.view.getxattr(self.inodes.rel(inode), name.decode())
        except OSError as e:
            if e.errno == errno.ENODATA:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR) from None
            raise

    @_fuse
    def listxattr(self, inode, ctx):
        return [n.encode() for n in self.view.listxattr(self.inodes.rel(inode))]

    @_fuse
    def statfs(self, ctx):
        root = self.view.upper.root if self.view.upper is not None else os.fsencode(self.view.lower.git.path)
        sv = os.statvfs(root)
        out = pyfuse3.StatvfsData()
        for f in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree", "f_favail"):
            setattr(out, f, getattr(sv, f))
        out.f_namemax = 255
        return out

    # -- files ----------------------------------------------------------
    @_fuse
    def open(self, inode, flags, ctx):
        rel = self.inodes.rel(inode)
        node = self.view.need(rel)
        writing = flags & os.O_ACCMODE != os.O_RDONLY or flags & os.O_TRUNC
        if writing:
            fd = self.view.open_fd(rel, flags)
            return pyfuse3.FileInfo(fh=self._new_fh(Handle(inode, fd=fd)))
        if node.upper is not None:
            fd = os.open(self.view.upper.path(rel), os.O_RDONLY | os.O_CLOEXEC)
            return pyfuse3.FileInfo(fh=self._new_fh(Handle(inode, fd=fd)))
        reader = self.view.lower.reader(node.lower)
        return pyfuse3.FileInfo(fh=self._new_fh(Handle(inode, reader=reader)), keep_cache=True)

    @_fuse
    def create(self, parent_inode, name, mode, flags, ctx):
        rel = self._child(parent_inode, name)
        fd = self.view.create(rel, mode, flags)
        ino = self.inodes.of(rel)
        return pyfuse3.FileInfo(fh=self._new_fh(Handle(ino, fd=fd))), self._entry(rel)

    @_fuse
    def read(self, fh, off, size):
        h = self.handles[fh]
        if h.fd is not None:
            return os.pread(h.fd, size, off)
        return h.reader.read(off, size)

    @_fuse
    def write(self, fh, off, buf):
        h = self.handles[fh]
        if h.fd is None:
            raise OSError(errno.EBADF, "")
        return os.pwrite(h.fd, buf, off)

    # no ``flush``: pyfuse3 answers ENOSYS, after which the kernel stops sending one per close

    @_fuse
    def release(self, fh):
        h = self.handles.pop(fh, None)
        if h is not None and h.fd is not None:
            os.close(h.fd)

    @_fuse
    def fsync(self, fh, datasync):
        h = self.handles[fh]
        if h.fd is not None:
            (os.fdatasync if datasync else os.fsync)(h.fd)

    @_fuse
    def fsyncdir(self, fh, datasync):
        if self.view.upper is None:
            return
        st = self.view.upper.lstat(self.inodes.rel(self.dir_ino[fh]))
        if st is not None and stat.S_ISDIR(st.st_mode):
            fd = os.open(self.view.upper.path(self.inodes.rel(self.dir_ino[fh])), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    # -- changes --------------------------------------------------------
    @_fuse
    def setattr(self, inode, attr, fields, fh, ctx):
        fd = self.handles[fh].fd if fh is not None and fh in self.handles else None
        if self.inodes.path.get(inode) is None and fd is not None:  # unlinked but still open
            if fields.update_size:
                os.ftruncate(fd, attr.st_size)
            if fields.update_mode:
                os.fchmod(fd, stat.S_IMODE(attr.st_mode))
            return self._attrs(inode, Node(os.fstat(fd), None))
        rel = self.inodes.rel(inode)
        self.view.setattr(
            rel, fd,
            mode=attr.st_mode if fields.update_mode else None,
            uid=attr.st_uid if fields.update_uid else None,
            gid=attr.st_gid if fields.update_gid else None,
            size=attr.st_size if fields.update_size else None,
            atime_ns=attr.st_atime_ns if fields.update_atime else None,
            mtime_ns=attr.st_mtime_ns if fields.update_mtime else None)
        return self._entry(rel)

    @_fuse
    def mkdir(self, parent_inode, name, mode, ctx):
        rel = self._child(parent_inode, name)
        self.view.mkdir(rel, mode)
        return self._entry(rel)

    @_fuse
    def symlink(self, parent_inode, name, target, ctx):
        rel = self._child(parent_inode, name)
        self.view.symlink(rel, target)
        return self._entry(rel)

    @_fuse
    def mknod(self, parent_inode, name, mode, rdev, ctx):
        rel = self._child(parent_inode, name)
        self.view.mknod(rel, mode, rdev)
        return self._entry(rel)

    @_fuse
    def unlink(self, parent_inode, name, ctx):
        rel = self._child(parent_inode, name)
        self.view.unlink(rel)
        self.inodes.detach(rel)

    @_fuse
    def rmdir(self, parent_inode, name, ctx):
        rel = self._child(parent_inode, name)
        self.view.rmdir(rel)
        self.inodes.detach(rel)

    @_fuse
    def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        if flags & pyfuse3.RENAME_EXCHANGE:
            raise OSError(errno.EINVAL, "")
        old, new = self._child(parent_inode_old, name_old), self._child(parent_inode_new, name_new)
        self.view.rename(old, new, bool(flags & pyfuse3.RENAME_NOREPLACE))
        self.inodes.move(old, new)

    @_fuse
    def link(self, inode, new_parent_inode, new_name, ctx):
        raise OSError(errno.EPERM, "hard links are not supported")

    @_fuse
    def setxattr(self, inode, name, value, ctx):
        self.view.setxattr(self.inodes.rel(inode), name.decode(), value)

    @_fuse
    def removexattr(self, inode, name, ctx):
        try:
            self.view.removexattr(self.inodes.rel(inode), name.decode())
        except OSError as e:
            if e.errno == errno.ENODATA:
                raise pyfuse3.FUSEError(pyfuse3.ENOATTR) from None
            raise
