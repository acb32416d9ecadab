"""FUSE requests of a git-pf mount: inodes, handles, and the View call each request makes.

Maps FUSE inodes to relative paths (stable for the life of the mount, moved
on rename), decodes each request's arguments (``protocol``), turns it into a
``View`` call and encodes the answer with cache hints: long entry/attribute
timeouts and ``keep_cache`` for the lower layer, which never changes under
a mount. A read-only mount answers ``open`` and ``opendir`` with ``ENOSYS``,
after which the kernel sends neither (nor ``release``) and passes file
handle 0: reads and listings are then served by inode; while no request
waits, the listings of the subdirectories of what was just listed are
built ahead of a walk; and the second file read from one directory hands
that directory's other small files to ``prefill``. Every mutating
handler runs to completion, so a snapshot (which holds the session still)
never sees half an operation. Errors are ``OSError``; the session answers them.
"""
from __future__ import annotations

import errno
import functools
import os
import stat
import time
from collections import OrderedDict, deque

from . import protocol as P
from .protocol import DOTS
from .upper import join
from .view import Node, View

LOWER_TIMEOUT = P.valid(86400.0)  # the lower layer never changes under a mount
UPPER_ATTR_TIMEOUT = P.valid(1.0)  # all changes pass through the kernel, which invalidates on write
LOWER_BLKSIZE = 128 * 1024
KEPT = 64  # readers and listings a read-only mount keeps by inode (it has no handles)
LIST_AHEAD = 8  # listings of subdirectories built ahead of a walk, while no request waits
AHEAD_QUEUE = 4096  # directories remembered as likely next
PREFILL_FILE = 64 * 1024  # files up to this size are stored ahead of their read ...
PREFILL_DIR = 8 * 1024 * 1024  # ... up to this much of one directory
PREFILL_SIBLINGS = 8  # directories after it, in its parent's order, stored ahead with it
PREFILL_LISTINGS = 4  # after that, directories listed whole are stored as soon as listed, this many in a row


def _no(code: int) -> OSError:
    return OSError(code, os.strerror(code))


def _name(body) -> bytes:
    """The one NUL-terminated name that ends a request."""
    return bytes(body[:-1])


def _ns(t_ns: int) -> tuple[int, int]:
    return divmod(t_ns, 1_000_000_000)


class Inodes:
    """inode <-> relative path; an unlinked inode keeps its number but loses its path."""

    def __init__(self):
        self.path: dict[int, bytes | None] = {P.ROOT_ID: b""}
        self.ino: dict[bytes, int] = {b"": P.ROOT_ID}
        self.next = P.ROOT_ID + 1

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


class Kept(OrderedDict):
    """A few values by key, least recently used dropped first."""

    def get_used(self, key):
        value = self.get(key)
        if value is not None:
            self.move_to_end(key)
        return value

    def keep(self, key, value):
        self[key] = value
        if len(self) > KEPT:
            self.popitem(last=False)
        return value


class Operations:
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
        self.listings = Kept()  # inode -> listing, read-only mounts
        self.ahead: deque[int] = deque()  # directories a walk will probably list next (read-only mounts)
        self.built_ahead: set[int] = set()  # ... whose listing is built and not asked for yet
        self.listed_ahead = 0  # listings built ahead so far
        self.served: set[int] = set()  # inodes whose content went to the kernel (read-only mounts)
        self.told: set[int] = set()  # inodes the kernel was given (lookup, readdirplus): what can be stored into
        self._listing_credit = 0  # listings still to prefill at once (renewed while files are read whole)
        self.prefilled: set[bytes] = set()  # directories handed to the prefill
        self._dir, self._dir_reads = None, 0  # the directory of the last read, and reads in a row there
        self.last_read = 0  # the inode of the last small file read whole
        times = _ns(view.lower.mtime_ns)
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
    def _attrs(self, ino: int, node: Node) -> tuple[tuple[int, int], tuple]:
        """(attribute timeout, fuse_attr fields) of ``node``."""
        st = node.upper
        if st is None:
            return self._lower_attrs(ino, node.lower)
        nlink = 1 if stat.S_ISDIR(st.st_mode) else st.st_nlink
        (a, an), (m, mn), (c, cn) = _ns(st.st_atime_ns), _ns(st.st_mtime_ns), _ns(st.st_ctime_ns)
        return UPPER_ATTR_TIMEOUT, (ino, st.st_size, st.st_blocks, a, m, c, an, mn, cn, st.st_mode, nlink,
                                    st.st_uid, st.st_gid, st.st_rdev, 4096, 0)

    def _lower_attrs(self, ino: int, e) -> tuple[tuple[int, int], tuple]:
        size = len(self.view.lower.readlink(e)) if stat.S_ISLNK(e.mode) else self.view.lower.size(e)
        return LOWER_TIMEOUT, (ino, size, (size + 511) // 512, *self._lower_times, e.mode, 1, self.uid, self.gid,
                               0, LOWER_BLKSIZE, 0)

    def _entry_of(self, ino: int, node: Node) -> bytes:
        return P.entry_out(LOWER_TIMEOUT, *self._attrs(ino, node))

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
            raise _no(errno.EBADF)
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
            raise _no(errno.ENOENT)
        ino = self.inodes.of(rel)
        self.told.add(ino)
        return self._entry_of(ino, node)

    def getattr(self, inode, body):
        rel = self.inodes.path.get(inode)
        if rel is None:
            fd = next((h.fd for h in self.handles.values() if h.ino == inode and h.fd is not None), None)
            if fd is None:
                raise _no(errno.ENOENT)
            return P.attr_out(*self._attrs(inode, Node(os.fstat(fd), None)))
        return P.attr_out(*self._attrs(inode, self.view.need(rel)))

    def readlink(self, inode, body):
        return self.view.readlink(self.inodes.rel(inode))

    def opendir(self, inode, body):
        if self.readonly:
            raise _no(errno.ENOSYS)  # zero-message opendir: listings are served by inode
        self.inodes.rel(inode)
        fh = self.next_fh
        self.next_fh += 1
        self.dirs[fh] = None
        return P.open_out(fh)

    def _list(self, inode: int) -> list:
        """[(name, attr timeout, attr)] of a directory; a read-only mount lists the lower one directly."""
        rel = self.inodes.rel(inode)
        if self.readonly:
            entries, attrs = self.view.lower.listdir(rel), self._lower_attrs
            if entries is None:
                raise _no(errno.ENOTDIR if self.view.lower.get(rel) is not None else errno.ENOENT)
        else:
            entries, attrs = self.view.listdir(rel), self._attrs
        of, prefix = self.inodes.of, rel + b"/" if rel else b""
        node_of = self.view.lower.get if self.readonly else self.view.node
        parent = rel.rpartition(b"/")[0]  # the root's '..' is itself: the kernel answers for the mount point
        dots = [(b".", *attrs(inode, node_of(rel))), (b"..", *attrs(of(parent), node_of(parent)))]
        return dots + [(name, *attrs(of(prefix + name), node)) for name, node in sorted(entries.items())]

    def _listing(self, inode: int, fh: int, off: int) -> list:
        if not fh:  # a read-only mount: the lower directory never changes
            listing = self.listings.get_used(inode) or self.listings.keep(inode, self._list(inode))
            if off == 0:
                self._walked(inode, listing)
            return listing
        listing = self.dirs.get(fh)
        if listing is None or off == 0:  # first call, or rewinddir: list afresh
            listing = self.dirs[fh] = self._list(inode)
        return listing

    def _walked(self, inode: int, listing: list) -> None:
        """A listing was asked for: its subdirectories are likely next, depth first as a walk goes."""
        if inode in self.built_ahead:
            self.built_ahead.discard(inode)
        else:  # the walk went elsewhere: what was built ahead is not what it needs
            self.built_ahead.clear()
        self.ahead.extendleft(attr[0] for name, _, attr in reversed(listing)
                              if stat.S_ISDIR(attr[9]) and name not in DOTS)
        while len(self.ahead) > AHEAD_QUEUE:
            self.ahead.pop()

    def idle_ready(self) -> bool:
        """Whether ``idle_step`` has work: a listing to build ahead of a walk."""
        return bool(self.ahead) and len(self.built_ahead) < LIST_AHEAD

    def idle_step(self) -> None:
        """Build the next listing a walk will probably ask for (called while no request waits)."""
        inode = self.ahead.popleft()
        if inode not in self.listings:
            self.listings.keep(inode, self._list(inode))
            self.built_ahead.add(inode)
            self.listed_ahead += 1

    def _readdir(self, inode, body, plus: bool):
        fh, off, size = P.READ_IN.unpack_from(body)
        listing = self._listing(inode, fh, off)
        out, end = P.dirents(listing, off, size, plus, LOWER_TIMEOUT)
        if plus:  # the kernel now holds an inode for each of these entries
            self.told.update(attr[0] for name, _, attr in listing[off:end] if name not in DOTS)
            if end == len(listing) and self._listing_credit > 0 and self.prefill is not None:
                self._listing_credit -= 1  # a program reading whole files lists this one next: store it now
                self._prefill_dir(self.inodes.rel(inode))
        return out

    def readdir(self, inode, body):
        return self._readdir(inode, body, False)

    def readdirplus(self, inode, body):
        return self._readdir(inode, body, True)

    def releasedir(self, inode, body):
        self.dirs.pop(P.FH_IN.unpack_from(body)[0], None)
        return b""

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
            raise _no(errno.ENOSYS)  # zero-message open: reads are served by inode, no release follows
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
        return h.reader.read(off, size)

    def _read_lower(self, inode: int, off: int, size: int):
        """A read-only mount's read, by inode: a small file read whole comes straight from
        its blob; anything else through a reader kept for the next read."""
        reader = self.readers.get_used(inode)
        if reader is not None:
            return reader.read(off, size)
        lower = self.view.lower
        rel = self.inodes.rel(inode)
        entry = lower.get(rel)
        if entry is None or entry.is_dir:
            raise _no(errno.ENOENT if entry is None else errno.EISDIR)
        if off == 0 and not entry.pointer and lower.size(entry) <= size:
            self._read_whole(inode, rel)
            return lower.content(entry)
        return self.readers.keep(inode, lower.reader(entry)).read(off, size)

    def _read_whole(self, inode: int, rel: bytes) -> None:
        """Note a small file read whole; the second in a row from one directory prefills the rest."""
        self.served.add(inode)
        self.last_read = inode
        parent = rel.rpartition(b"/")[0]
        if parent != self._dir:
            self._dir, self._dir_reads = parent, 0
        self._dir_reads += 1
        if self._dir_reads == 2 and self.prefill is not None:
            self._listing_credit = PREFILL_LISTINGS
            self._prefill_from(parent)

    def _prefill_from(self, parent: bytes) -> None:
        """Hand ``parent``'s small files to the prefill, then those of the directories after
        it in its own parent's order (a walk goes there next), as far as the kernel knows them."""
        grand, _, _ = parent.rpartition(b"/")
        siblings = list((self.view.lower.listdir(grand) or {}).items()) if parent else []
        names = [name for name, e in siblings if e.is_dir]
        here = parent.rpartition(b"/")[2]
        after = names[names.index(here) + 1:][:PREFILL_SIBLINGS] if here in names else []
        for d in [parent, *(join(grand, n) for n in after)]:
            self._prefill_dir(d, always=d == parent)

    def _prefill_dir(self, d: bytes, always: bool = True) -> None:
        """Hand the small files of ``d`` the kernel knows to the prefill, once per directory
        (a directory whose files the kernel does not know yet is not marked, unless ``always``)."""
        if d in self.prefilled:
            return
        files = self._small_files(d)
        if files or always:
            self.prefilled.add(d)
            self.prefill.push(files, self.served, lambda: self.last_read)

    def _small_files(self, parent: bytes) -> list:
        """(inode, content function) of the small files of ``parent`` the kernel knows and has not read."""
        lower, known, told, out, total = self.view.lower, self.inodes.ino, self.told, [], 0
        for name, e in (lower.listdir(parent) or {}).items():
            ino = known.get(join(parent, name))
            if ino is None or ino not in told or ino in self.served or e.pointer or not stat.S_ISREG(e.mode):
                continue
            size = lower.size(e)
            if 0 < size <= PREFILL_FILE:
                total += size
                if total > PREFILL_DIR:
                    break
                out.append((ino, functools.partial(lower.content, e)))
        return out

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
            raise _no(errno.EINVAL)
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


def _sized(value: bytes, size: int) -> bytes:
    """An xattr answer: the length alone when asked with size 0, ERANGE when it does not fit."""
    if size == 0:
        return P.XATTR_SIZE_OUT.pack(len(value), 0)
    if len(value) > size:
        raise _no(errno.ERANGE)
    return value


def _set_time(valid: int, field: int, now: int, sec: int, nsec: int) -> int | None:
    if not valid & field:
        return None
    return time.time_ns() if valid & now else sec * 1_000_000_000 + nsec
