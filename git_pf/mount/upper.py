"""The copy-on-write upper layer of an ``--rw`` mount: a real directory plus whiteouts.

``$GIT_DIR/pf/mounts/<id>/upper/`` mirrors the mount's paths for everything
created or copied up: real files (content, permission bits, ``user.*``
xattrs), real symlinks, real directories. A marker file
``<dir>/.pf-wh.<name>`` hides the lower ``<dir>/<name>`` and everything below
it (docs/mount.md). Whiteouts are also kept in memory, loaded once at start.
Staging for copy-up happens in ``<id>/tmp/`` and lands by rename. Knows
nothing of git or FUSE.
"""
from __future__ import annotations

import os
import shutil
import tempfile

from git_pf.mount.mounts import WHITEOUT_PREFIX

WH = os.fsencode(WHITEOUT_PREFIX)


def join(rel: bytes, name: bytes) -> bytes:
    return rel + b"/" + name if rel else name


def split(rel: bytes) -> tuple[bytes, bytes]:
    parent, _, name = rel.rpartition(b"/")
    return parent, name


class Upper:
    def __init__(self, root: bytes, tmp: bytes):
        self.root, self.tmp = root, tmp
        os.makedirs(tmp, exist_ok=True)
        self.whiteouts: set[bytes] = set()
        self.reload()

    def reload(self) -> None:
        self.whiteouts.clear()
        for base, dirs, files in os.walk(self.root):
            rel = os.path.relpath(base, self.root)
            rel = b"" if rel == b"." else rel
            for name in files:
                if name.startswith(WH):
                    self.whiteouts.add(join(rel, name[len(WH):]))

    def path(self, rel: bytes) -> bytes:
        return os.path.join(self.root, rel) if rel else self.root

    def lstat(self, rel: bytes) -> os.stat_result | None:
        try:
            return os.lstat(self.path(rel))
        except (FileNotFoundError, NotADirectoryError):
            return None

    def listdir(self, rel: bytes) -> list[bytes]:
        try:
            return [n for n in os.listdir(self.path(rel)) if not n.startswith(WH)]
        except (FileNotFoundError, NotADirectoryError):
            return []

    # -- whiteouts ------------------------------------------------------
    def hidden(self, rel: bytes) -> bool:
        """True when a whiteout hides the lower ``rel`` (on it or on an ancestor)."""
        if not self.whiteouts:
            return False
        while rel:
            if rel in self.whiteouts:
                return True
            rel = split(rel)[0]
        return False

    def add_whiteout(self, rel: bytes) -> None:
        parent, name = split(rel)
        fd = os.open(os.path.join(self.path(parent), WH + name), os.O_CREAT | os.O_WRONLY, 0o600)
        os.close(fd)
        self.whiteouts.add(rel)

    def forget_below(self, rel: bytes) -> None:
        """Drop in-memory whiteouts under ``rel`` (its upper directory went away)."""
        prefix = rel + b"/"
        self.whiteouts = {w for w in self.whiteouts if not w.startswith(prefix)}

    def move_below(self, old: bytes, new: bytes) -> None:
        prefix = old + b"/"
        moved = {w for w in self.whiteouts if w.startswith(prefix)}
        self.whiteouts -= moved
        self.whiteouts |= {new + w[len(old):] for w in moved}

    # -- staging --------------------------------------------------------
    def stage(self) -> tuple[int, bytes]:
        """A new empty file in the staging directory: (fd, path)."""
        return tempfile.mkstemp(dir=self.tmp, prefix=b"up-")

    def land(self, staged: bytes, rel: bytes) -> None:
        os.rename(staged, self.path(rel))

    def remove_tree(self, rel: bytes) -> None:
        shutil.rmtree(self.path(rel))
        self.forget_below(rel)
