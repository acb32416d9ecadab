"""The ``file`` adapter: side-store objects in a directory laid out like the local store.

The directory (given as ``file:<dir>``, or a local bare repo's ``pf/objects``)
holds ``<2 hex>/<62 hex>`` zstd frames, exactly the side-store layout, so
any git-pf side store can serve as one. Uploads copy frames atomically;
downloads are verified (decoded and hashed) before they enter the local
store. Touches nothing but that directory and the local store.
"""
from __future__ import annotations

from pathlib import Path

from ..sidestore import SideStore
from .progress import Progress


class FileAdapter:
    def __init__(self, root: Path):
        self.remote = SideStore(root)

    def refresh(self) -> None:
        pass

    def has(self, oids) -> set[str]:
        return {o for o in oids if self.remote.has(o)}

    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        sent = 0
        with progress.task("uploading objects", len(oids)) as advance:
            for oid in oids:
                frame = store.read_compressed(oid)
                if not self.remote.has(oid):
                    self.remote._write_atomic(self.remote.path_for(oid), frame)
                    sent += len(frame)
                advance(1)
        return sent

    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        with progress.task("fetching objects", len(oids)) as advance:
            for oid in oids:
                path = self.remote.path_for(oid)
                if path.is_file() and not store.has(oid):
                    store.put_compressed(oid, path.read_bytes())
                advance(1)
