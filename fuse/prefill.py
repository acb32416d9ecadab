"""Directory read-ahead: small files stored into the kernel's page cache before they are read.

Once a program has read two files of one directory it usually reads the
rest (``cat``, ``grep -r``, ``tar``, an import of a package). The mount then
hands the directory's remaining small files to this worker, which stores
each file's content into the kernel's page cache (``FUSE_NOTIFY_STORE``), so
their reads never reach the daemon. A store into a page the kernel is
reading at that moment waits for that read's answer, which only the request
loop can give: hence a thread of its own, writing through its own duplicate
of the FUSE device, and a session that keeps serving until the worker has
stopped. A reader faster than the worker is not raced for the same files:
once it gets ahead, the worker gives that directory up (storing ahead of
such a reader only takes time from the request loop that serves it). Gets
(inode, content function) pairs; knows nothing of git or paths.
"""
from __future__ import annotations

import errno
import logging
import os
import queue
import threading

from . import protocol as P

log = logging.getLogger("git_pf.fuse")


class Prefill:
    def __init__(self, fd: int):
        self.fd = os.dup(fd)  # the worker's own: closed by the worker, never reused under it
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.stopping = False
        self.stored = 0  # files stored so far
        self.thread = threading.Thread(target=self._run, daemon=True, name="prefill")
        self.thread.start()

    def push(self, files: list, skip: set, latest) -> None:
        """Store ``files`` ([(inode, content function)]) in order, except inodes in ``skip`` by
        then; ``latest()`` is the inode the reader read last."""
        if files:
            self.jobs.put((files, skip, latest))

    def stop(self) -> None:
        """Stop after the file being stored (does not wait)."""
        self.stopping = True
        self.jobs.put(None)

    def busy(self) -> bool:
        return self.thread.is_alive()

    def _run(self) -> None:
        try:
            while not self.stopping:
                job = self.jobs.get()
                if job is None:
                    break
                self._store_all(*job)
        finally:
            os.close(self.fd)

    def _store_all(self, files: list, skip: set, latest) -> None:
        where = {ino: i for i, (ino, _) in enumerate(files)}
        for i, (ino, content) in enumerate(files):
            if self.stopping:
                return
            ahead = where.get(latest())
            if ahead is not None and ahead >= i:  # the reader is faster than storing ahead of it
                return
            if ino in skip:  # read meanwhile: already in the page cache
                continue
            try:
                P.store(self.fd, ino, content())
                self.stored += 1
            except OSError as e:
                if e.errno in (errno.ENODEV, errno.EBADF, errno.ECONNABORTED):  # the mount is gone
                    self.stopping = True
                    return
                # ENOENT: the kernel no longer holds that inode; nothing to store into
            except Exception as e:  # a damaged blob: its own read will report it
                log.debug("prefill of inode %d skipped: %s", ino, e)
