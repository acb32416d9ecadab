"""Directory requests of a git-pf mount, and what a read-only mount serves ahead of a walk.

Builds a directory's listing (a read-only mount lists the lower layer
directly and keeps 64 listings by inode; a ``--rw`` mount lists afresh per
open directory handle) and answers ``opendir``, ``readdir``,
``readdirplus`` and ``releasedir``. On a read-only mount it also keeps the
read-ahead bookkeeping: the listings of the subdirectories of what was just
listed are built while no request waits, and the second small file read
whole from one directory hands that directory's other small files (then
its next siblings', then those of the next directories listed whole) to
``prefill``. A mixin of ``ops.Operations``: it reads the operations' view
and attributes, takes inodes and directory handles from their tables, and
changes no file.
"""
from __future__ import annotations

import errno
import functools
import stat
from collections import deque

from . import protocol as P
from .attrs import LOWER_TIMEOUT
from .inodes import Kept, no
from .protocol import DOTS
from .upper import join

LIST_AHEAD = 8  # listings of subdirectories built ahead of a walk, while no request waits
AHEAD_QUEUE = 4096  # directories remembered as likely next
PREFILL_FILE = 64 * 1024  # files up to this size are stored ahead of their read ...
PREFILL_DIR = 8 * 1024 * 1024  # ... up to this much of one directory
PREFILL_SIBLINGS = 8  # directories after it, in its parent's order, stored ahead with it
PREFILL_LISTINGS = 4  # after that, directories listed whole are stored as soon as listed, this many in a row


class Listing:
    """Directory requests and read-ahead bookkeeping of ``Operations`` (see the module docstring)."""

    def _new_walk(self) -> None:
        """Forget the listings and read-ahead state (a new mount, or a snapshot switched the image)."""
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

    def opendir(self, inode, body):
        if self.readonly:
            raise no(errno.ENOSYS)  # zero-message opendir: listings are served by inode
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
                raise no(errno.ENOTDIR if self.view.lower.get(rel) is not None else errno.ENOENT)
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
