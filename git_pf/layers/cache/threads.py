"""The KV layer's page threads: one pool for the process, shared by capture and restore.

Page work is compute (planes, sha256, zstd, copies that release the GIL) with
a file read or write between: one or two threads more than cores keep the
cores busy while a thread waits on its I/O. The pool is kept, so the buffers
each thread reuses (``planes.scratch``, ``directio.buffer``) are taken once
per process, not once per capture or restore. A child made by ``fork`` has
none of its parent's threads, so it starts a pool of its own (agents fork
workers that restore the same caches). Never submit page work from a page
thread (it would wait on itself). Knows nothing of pages or stores.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

from .pages import WORKERS

PAGE_THREADS = WORKERS + 2
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def _forget_in_child() -> None:
    """After ``fork``: the parent's pool has no threads here, and work given to it would wait
    for ever; the child's first use starts a new one."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


def pool() -> ThreadPoolExecutor:
    """The process's pool of page threads, started on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="pf-kv")
        return _pool
