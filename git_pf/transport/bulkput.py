"""Importing many received frames into the local side store with one flush to disk.

``SideStore.put_compressed`` fsyncs every object; for a batch of hundreds of
received frames that dominates. Here each frame is verified (decoded and
hashed to its name, else CorruptObject and nothing of it is kept), written
to the store's ``tmp/``, then the whole filesystem is flushed once
(``syncfs``; per-file fsync where that is unavailable) and only then is each
file renamed into place, so no object becomes visible before its bytes are
durable. Uses the store's public layout (``path_for``, ``root/tmp``) only.
"""
from __future__ import annotations

import os
import tempfile
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable


from ..sidestore import SideStore, sync_files, verify_frame
from .. import writeback

_WORKERS = max(2, min(4, os.cpu_count() or 2))


verify = verify_frame  # decoding and hashing release the GIL: run on worker threads


def put_many(store: SideStore, frames: Iterable[tuple[str, bytes]]) -> int:
    """Verify and store every ``(oid, zstd frame)``; returns how many were new."""
    tmpdir = store.root / "tmp"
    tmpdir.mkdir(parents=True, exist_ok=True)
    staged: list[tuple[str, str]] = []

    def stage(oid: str, frame: bytes, checked) -> None:
        checked.result()  # CorruptObject: nothing of this batch is kept
        fd, tmp = tempfile.mkstemp(dir=tmpdir, prefix="recv-")
        staged.append((oid, tmp))
        with os.fdopen(fd, "wb") as f:
            f.write(frame)
            f.flush()
            writeback.start(f.fileno())  # the disk starts now; the one syncfs below waits for the tail
        os.chmod(tmp, 0o444)

    try:
        with ThreadPoolExecutor(_WORKERS) as pool:  # decoding and hashing release the GIL
            window: deque = deque()
            for oid, frame in frames:
                if store.has(oid):
                    continue
                window.append((oid, frame, pool.submit(verify, oid, frame)))
                if len(window) > 2 * _WORKERS:
                    stage(*window.popleft())
            while window:
                stage(*window.popleft())
        sync_files(tmpdir, [tmp for _, tmp in staged])
        for oid, tmp in staged:
            path = store.path_for(oid)
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, path)
            store.note_verified(oid)  # verified above: reading it back for checkout need not re-hash
        return len(staged)
    finally:
        for _, tmp in staged:
            if os.path.exists(tmp):
                os.unlink(tmp)
