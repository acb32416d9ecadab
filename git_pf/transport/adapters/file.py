"""The ``file`` adapter: side-store objects in a directory laid out like the local store.

The directory (given as ``file:<dir>``, or a local bare repo's ``pf/objects``)
holds ``<2 hex>/<62 hex>`` zstd frames, exactly the side-store layout, so
any git-pf side store can serve as one. Frames are immutable and
content-addressed, so on one filesystem they are hard-linked rather than
copied (as git-lfs does for local remotes); elsewhere they are copied
atomically. Downloads are verified (decoded and hashed) before they enter
the local store: the frame is linked to a temporary name, that inode is
verified, then renamed into place.
Touches nothing but that directory and the local store.
"""
from __future__ import annotations

import os
from pathlib import Path


from ...store.frames import verify_frame
from ...store.sidestore import SideStore
from ..objectstore import ObjectStore
from ..progress import Progress

def _link(src: str | Path, dst: Path) -> bool:
    """Hard-link ``src`` at ``dst``; False when that cannot be done here (other filesystem...)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst, follow_symlinks=True)
        return True
    except FileExistsError:
        return True
    except OSError:
        return False


class FileAdapter(ObjectStore):
    def __init__(self, root: Path):
        self.remote = SideStore(root)

    def refresh(self) -> None:
        """Nothing to learn ahead: presence is checked per object."""

    load_local = refresh

    def has(self, oids) -> set[str]:
        return {o for o in oids if self.remote.has(o)}

    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        sent = 0
        store.ensure(oids)
        with progress.task("uploading objects", len(oids)) as advance:
            for oid in oids:
                dst = self.remote.path_for(oid)
                if not dst.is_file():
                    src = store.path_for(oid)
                    if not src.is_file():  # held as a git blob: its name is checked on the way
                        self.remote.put_compressed(oid, bytes(store.frame(oid)))
                    elif not _link(src, dst):  # another filesystem: a name checked here already
                        self.remote.copy_frame(oid, store.frame(oid))
                    sent += dst.stat().st_size
                advance(1)
        return sent

    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        with progress.task("fetching objects", len(oids)) as advance:
            for oid in oids:
                path = self.remote.path_for(oid)
                if path.is_file() and not store.has(oid):
                    self._fetch_one(store, oid, path)
                advance(1)

    @staticmethod
    def _fetch_one(store: SideStore, oid: str, path: Path) -> None:
        """Link the remote frame to a temporary name, verify *that* inode, then move it into place."""
        tmp = store.root / "tmp" / f"link-{oid[:16]}-{os.getpid()}"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        tmp.unlink(missing_ok=True)
        if not _link(path, tmp):
            frame = path.read_bytes()
            verify_frame(oid, frame)
            store.put_compressed(oid, frame)
            return
        try:
            verify_frame(oid, tmp.read_bytes())
            store.path_for(oid).parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, store.path_for(oid))
        finally:
            tmp.unlink(missing_ok=True)
