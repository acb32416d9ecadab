"""The merged view of a mount: the upper layer over the lower one, by relative path.

Every operation here is synchronous and path based and raises ``OSError``
with the errno the caller should see; ``inodes`` maps inodes to paths and ``ops``
FUSE requests to these calls. Rules (docs/mount.md): an upper entry shadows
the lower one of the same name; upper and lower directories merge; a
whiteout hides the lower entry and all below it; the first change to a
lower entry copies it up (its directories first). With no upper layer
(a read-only mount) every change is EROFS.
"""
from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass

from .lower import LEntry, Lower
from .upper import WH, Upper, join, split

O_PASS = os.O_ACCMODE | os.O_APPEND | os.O_TRUNC | os.O_NOFOLLOW | os.O_SYNC | os.O_DSYNC


def _err(code: int) -> OSError:
    return OSError(code, os.strerror(code))


@dataclass
class Node:
    upper: os.stat_result | None
    lower: LEntry | None

    @property
    def mode(self) -> int:
        return self.upper.st_mode if self.upper is not None else self.lower.mode

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)


class View:
    def __init__(self, lower: Lower, upper: Upper | None):
        self.lower, self.upper = lower, upper

    # -- reading --------------------------------------------------------
    def node(self, rel: bytes) -> Node | None:
        up = self.upper.lstat(rel) if self.upper is not None else None
        low = None
        if up is None or stat.S_ISDIR(up.st_mode):
            if self.upper is None or not self.upper.hidden(rel):
                low = self.lower.get(rel)
                if low is not None and up is not None and not low.is_dir:
                    low = None
        if up is None and low is None:
            return None
        return Node(up, low)

    def need(self, rel: bytes) -> Node:
        found = self.node(rel)
        if found is None:
            raise _err(errno.ENOENT)
        return found

    def listdir(self, rel: bytes) -> dict[bytes, Node]:
        node = self.need(rel)
        if not node.is_dir:
            raise _err(errno.ENOTDIR)
        out: dict[bytes, Node] = {}
        if node.lower is not None:
            for name, entry in (self.lower.listdir(rel) or {}).items():
                if self.upper is None or not self.upper.hidden(join(rel, name)):
                    out[name] = Node(None, entry)
        if node.upper is not None:
            for name in self.upper.listdir(rel):
                st = self.upper.lstat(join(rel, name))
                if st is None:
                    continue
                below = out.get(name)
                low = below.lower if below is not None and stat.S_ISDIR(st.st_mode) and below.lower.is_dir else None
                out[name] = Node(st, low)
        return out

    def readlink(self, rel: bytes) -> bytes:
        node = self.need(rel)
        if not stat.S_ISLNK(node.mode):
            raise _err(errno.EINVAL)
        return os.readlink(self.upper.path(rel)) if node.upper is not None else self.lower.readlink(node.lower)

    def getxattr(self, rel: bytes, name: str) -> bytes:
        node = self.need(rel)
        if node.upper is not None:
            try:
                return os.getxattr(self.upper.path(rel), name, follow_symlinks=False)
            except OSError as e:
                raise _err(errno.ENODATA if e.errno == errno.ENODATA else e.errno) from None
        value = node.lower.xattrs.get(name)
        if value is None:
            raise _err(errno.ENODATA)
        return value

    def listxattr(self, rel: bytes) -> list[str]:
        node = self.need(rel)
        if node.upper is not None:
            try:
                return [n for n in os.listxattr(self.upper.path(rel), follow_symlinks=False) if n.startswith("user.")]
            except OSError:
                return []
        return sorted(node.lower.xattrs)

    # -- copy-up --------------------------------------------------------
    def _rw(self) -> Upper:
        if self.upper is None:
            raise _err(errno.EROFS)
        return self.upper

    @staticmethod
    def _check_name(rel: bytes) -> None:
        if split(rel)[1].startswith(WH):
            raise _err(errno.EPERM)  # reserved for whiteouts (docs/mount.md)

    def ensure_dir(self, rel: bytes) -> None:
        """Make ``rel`` (a visible directory) exist in the upper layer, ancestors first."""
        upper = self._rw()
        if not rel:
            return
        st = upper.lstat(rel)
        if st is not None and stat.S_ISDIR(st.st_mode):
            return
        self.ensure_dir(split(rel)[0])
        self.copy_up(rel)

    def copy_up(self, rel: bytes, content: bool = True) -> None:
        upper = self._rw()
        node = self.need(rel)
        if node.upper is not None:
            return
        self._check_name(rel)
        self.ensure_dir(split(rel)[0])
        entry, dest = node.lower, upper.path(rel)
        perm = stat.S_IMODE(entry.mode)
        if entry.is_dir:
            os.mkdir(dest, perm)
            os.chmod(dest, perm)
            _set_xattrs(dest, entry.xattrs)
            return
        if stat.S_ISLNK(entry.mode):
            staged = os.path.join(upper.tmp, b"ln-" + os.urandom(8).hex().encode())
            os.symlink(self.lower.readlink(entry), staged)
            upper.land(staged, rel)
            return
        fd, staged = upper.stage()
        try:
            if content:
                self.lower.copy_to(entry, fd)
            os.fchmod(fd, perm)
            for name, value in entry.xattrs.items():
                os.setxattr(fd, name, value)
        except BaseException:
            os.close(fd)
            os.unlink(staged)
            raise
        os.close(fd)
        upper.land(staged, rel)

    def copy_up_tree(self, rel: bytes) -> None:
        """Copy up a directory and everything visible below it (for a directory rename)."""
        self.copy_up(rel)
        for name, child in self.listdir(rel).items():
            sub = join(rel, name)
            if child.lower is None:
                continue
            if child.is_dir:
                self.copy_up_tree(sub)
            else:
                self.copy_up(sub)

    # -- changes --------------------------------------------------------
    def open_fd(self, rel: bytes, flags: int, mode: int = 0) -> int:
        """An fd on the upper file, copying it up first (without content for O_TRUNC)."""
        node = self.need(rel)
        if node.is_dir:
            raise _err(errno.EISDIR)
        self.copy_up(rel, content=not flags & os.O_TRUNC)
        return os.open(self.upper.path(rel), flags & O_PASS | os.O_CLOEXEC)

    def create(self, rel: bytes, mode: int, flags: int) -> int:
        upper = self._rw()
        self._check_name(rel)
        self.ensure_dir(split(rel)[0])
        return os.open(upper.path(rel), flags & O_PASS | os.O_CREAT | os.O_CLOEXEC, stat.S_IMODE(mode))

    def mkdir(self, rel: bytes, mode: int) -> None:
        upper = self._rw()
        self._check_name(rel)
        if self.node(rel) is not None:
            raise _err(errno.EEXIST)
        self.ensure_dir(split(rel)[0])
        os.mkdir(upper.path(rel), stat.S_IMODE(mode))

    def symlink(self, rel: bytes, target: bytes) -> None:
        upper = self._rw()
        self._check_name(rel)
        if self.node(rel) is not None:
            raise _err(errno.EEXIST)
        self.ensure_dir(split(rel)[0])
        os.symlink(target, upper.path(rel))

    def mknod(self, rel: bytes, mode: int, rdev: int) -> None:
        upper = self._rw()
        self._check_name(rel)
        self.ensure_dir(split(rel)[0])
        os.mknod(upper.path(rel), mode, rdev)

    def unlink(self, rel: bytes) -> None:
        upper = self._rw()
        node = self.need(rel)
        if node.is_dir:
            raise _err(errno.EISDIR)
        if node.upper is not None:
            os.unlink(upper.path(rel))
        if self._lower_visible(rel):
            self.ensure_dir(split(rel)[0])
            upper.add_whiteout(rel)

    def rmdir(self, rel: bytes) -> None:
        upper = self._rw()
        node = self.need(rel)
        if not node.is_dir:
            raise _err(errno.ENOTDIR)
        if self.listdir(rel):
            raise _err(errno.ENOTEMPTY)
        if node.upper is not None:
            upper.remove_tree(rel)
        if node.lower is not None:
            self.ensure_dir(split(rel)[0])
            upper.add_whiteout(rel)

    def _lower_visible(self, rel: bytes) -> bool:
        return not self.upper.hidden(rel) and self.lower.get(rel) is not None

    def rename(self, old: bytes, new: bytes, noreplace: bool) -> None:
        upper = self._rw()
        src = self.need(old)
        self._check_name(new)
        dst = self.node(new)
        if old == new:
            return
        if dst is not None:
            if noreplace:
                raise _err(errno.EEXIST)
            if src.is_dir and not dst.is_dir:
                raise _err(errno.ENOTDIR)
            if dst.is_dir and not src.is_dir:
                raise _err(errno.EISDIR)
            if dst.is_dir and self.listdir(new):
                raise _err(errno.ENOTEMPTY)
        old_lower, new_lower = self._lower_visible(old), self._lower_visible(new)
        if src.is_dir:
            self.copy_up_tree(old)
        else:
            self.copy_up(old)
        self.ensure_dir(split(new)[0])
        if dst is not None and dst.upper is not None and dst.is_dir:
            upper.remove_tree(new)
        os.rename(upper.path(old), upper.path(new))
        if src.is_dir:
            upper.move_below(old, new)
            if new_lower:
                upper.add_whiteout(new)
        if old_lower:
            upper.add_whiteout(old)

    def setattr(self, rel: bytes, fd: int | None, *, mode=None, uid=None, gid=None, size=None,
                atime_ns=None, mtime_ns=None) -> None:
        upper = self._rw()
        node = self.need(rel)
        if node.upper is None:
            if node.is_dir:
                self.ensure_dir(rel)
            else:
                self.copy_up(rel, content=size != 0)
        path = upper.path(rel)
        is_link = stat.S_ISLNK(self.need(rel).mode)
        if mode is not None and not is_link:
            os.chmod(path, stat.S_IMODE(mode))
        if uid is not None or gid is not None:
            os.lchown(path, -1 if uid is None else uid, -1 if gid is None else gid)
        if size is not None:
            if fd is not None:
                os.ftruncate(fd, size)
            else:
                os.truncate(path, size)
        if atime_ns is not None or mtime_ns is not None:
            st = os.lstat(path)
            times = (st.st_atime_ns if atime_ns is None else atime_ns, st.st_mtime_ns if mtime_ns is None else mtime_ns)
            os.utime(path, ns=times, follow_symlinks=False)

    def setxattr(self, rel: bytes, name: str, value: bytes) -> None:
        if not name.startswith("user."):
            raise _err(errno.ENOTSUP)
        self._rw()
        self._copy_up_any(rel)
        os.setxattr(self.upper.path(rel), name, value, follow_symlinks=False)

    def removexattr(self, rel: bytes, name: str) -> None:
        self._rw()
        self.getxattr(rel, name)  # ENODATA when absent
        self._copy_up_any(rel)
        os.removexattr(self.upper.path(rel), name, follow_symlinks=False)

    def _copy_up_any(self, rel: bytes) -> None:
        node = self.need(rel)
        if node.upper is None:
            self.ensure_dir(rel) if node.is_dir else self.copy_up(rel)


def _set_xattrs(path: bytes, xattrs: dict[str, bytes]) -> None:
    for name, value in xattrs.items():
        os.setxattr(path, name, value, follow_symlinks=False)
