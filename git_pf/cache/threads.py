"""The KV layer's page threads: one pool for the process, shared by capture and restore.

Page work is compute (planes, sha256, zstd, copies that release the GIL) with
a file read or write between: one or two threads more than cores keep the
cores busy while a thread waits on its I/O. The pool is kept, so the buffers
each thread reuses (``planes.scratch``, ``directio.buffer``) are taken once
per process, not once per capture or restore. Never submit page work from a
page thread (it would wait on itself). Knows nothing of pages or stores.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from .pages import WORKERS

PAGE_THREADS = WORKERS + 2
_pool: ThreadPoolExecutor | None = None
_lock = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The process's pool of page threads, started on first use."""
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(PAGE_THREADS, thread_name_prefix="pf-kv")
        return _pool
