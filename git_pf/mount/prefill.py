"""Directory read-ahead: small files stored into the kernel's page cache before they are read.

Once a program has read two files of one directory it usually reads the
rest (``cat``, ``grep -r``, ``tar``, an import of a package). The mount then
hands the directory's remaining small files to this worker, which stores
each file's content into the kernel's page cache (``FUSE_NOTIFY_STORE``), so
their reads never reach the daemon. A store into a page the kernel is
reading at that moment waits for that read's answer, which only the request
loop can give: hence a thread of its own, writing through its own duplicate
of the FUSE device, and a session that keeps serving until the worker has
stopped. A reader is not raced for the same files: when it catches up, the
worker skips past it and stores on from there, so a reader that reads
faster than files are stored meets stored files again soon, instead of
asking for every file after the first one it missed. A file whose inode the
kernel does not hold yet (the listing that names it is answered, but the
program that asked has not run since) is stored again after short pauses.
Gets (inode, content function) pairs; knows nothing of git or paths.
"""
from __future__ import annotations

import errno
import logging
import os
import queue
import threading

from . import protocol as P

log = logging.getLogger("git_pf.mount")

_LEAD = 1  # files left to a reader that caught up (it is asking for the next one already)
# A listing's reply is answered before the kernel takes in the inodes it names: that happens
# when the listing program runs again, which on a busy machine can be later than the store.
# Files the kernel did not hold yet are stored again after these pauses (seconds).
_RETRY_DELAYS = (0.005, 0.02, 0.1, 0.5)


class Prefill:
    def __init__(self, fd: int):
        self.fd = os.dup(fd)  # the worker's own: closed by the worker, never reused under it
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.stopping = False
        self.stored = 0  # files stored so far
        self._working = False  # a job is being stored
        self._held: list = []  # jobs pushed while the current request is served
        self._stopped = threading.Event()  # cuts a pause before storing again short
        self.thread = threading.Thread(target=self._run, daemon=True, name="prefill")
        self.thread.start()

    def push(self, files: list, skip: set, latest) -> None:
        """Store ``files`` ([(inode, content function)]) in order, except inodes in ``skip`` by
        then; ``latest()`` is the inode the reader read last. Held until ``release``: the
        request being served may be the one that shows the kernel these inodes, and a
        store into an inode the kernel does not hold yet is lost."""
        if files:
            self._held.append((files, skip, latest))

    def release(self) -> None:
        """Start on what was pushed (called by the request loop once a request is answered)."""
        if self._held:
            for job in self._held:
                self.jobs.put(job)
            self._held.clear()

    def stop(self) -> None:
        """Stop after the file being stored (does not wait)."""
        self.stopping = True
        self._stopped.set()
        self.jobs.put(None)

    def busy(self) -> bool:
        return self.thread.is_alive()

    def working(self) -> bool:
        """Whether files are being stored now or wait to be."""
        return self._working or not self.jobs.empty()

    def _run(self) -> None:
        try:
            while not self.stopping:
                job = self.jobs.get()
                if job is None:
                    break
                self._working = True
                try:
                    self._store_all(*job)
                finally:
                    self._working = False
        finally:
            os.close(self.fd)

    def _store_all(self, files: list, skip: set, latest) -> None:
        where = {ino: i for i, (ino, _) in enumerate(files)}
        missed = []  # files whose inode the kernel did not hold yet
        i = 0
        while i < len(files):
            if self.stopping:
                return
            ahead = where.get(latest())
            if ahead is not None and ahead >= i:  # the reader caught up: get ahead of it again
                i = ahead + 1 + _LEAD
                continue
            ino, content = files[i]
            i += 1
            if ino in skip:  # read meanwhile: already in the page cache
                continue
            if self._store(ino, content) is False:
                missed.append((ino, content))
        for delay in _RETRY_DELAYS:
            if not missed or self._stopped.wait(delay):
                return
            missed = [(ino, content) for ino, content in missed
                      if ino not in skip and self._store(ino, content) is False]

    def _store(self, ino: int, content) -> bool | None:
        """Store one file: True once stored, False when the kernel holds no such inode (yet),
        None when it cannot be stored (the mount is gone, or its content does not read)."""
        try:
            P.store(self.fd, ino, content())
        except OSError as e:
            if e.errno in (errno.ENODEV, errno.EBADF, errno.ECONNABORTED):  # the mount is gone
                self.stopping = True
                self._stopped.set()
                return None
            return False if e.errno == errno.ENOENT else None
        except Exception as e:  # a damaged blob: its own read will report it
            log.debug("prefill of inode %d skipped: %s", ino, e)
            return None
        self.stored += 1
        return True
