"""The command server's file watcher for ``git pf snapshot --fs-root`` (docs/server.md).

The server keeps a ``runs.fswatch.DirWatch`` on each sandbox it snapshotted
(``Watches``, in the server's parent process). Before it forks a snapshot it
hands the child the directories that changed since the last snapshot of that
sandbox together with the identity (inode, mtime, size) of the stat-cache
file that snapshot saved (``Hint``). The child skips the listing of every
directory nothing changed in only when the stat-cache file it loads is still
exactly that file; otherwise (a first snapshot, a snapshot made by another
process, a lost or overflowed event queue, the watch limit, a new server) it
walks with the stat cache as always. The stat cache stays the truth. Reads the
filesystem; the child writes one line to the server's report pipe.
"""
from __future__ import annotations

import os
import time

MAX_ROOTS = 8  # sandboxes watched at once; the least recently snapshotted goes first

HINT: "Hint | None" = None  # in a command the server runs: what its watcher saw


def fs_root_arg(argv: list[str]) -> str | None:
    """The ``--fs-root`` of a ``snapshot`` command line, else None."""
    if not argv or argv[0] != "snapshot":
        return None
    found = None
    for i, a in enumerate(argv[1:], 1):
        if a == "--":
            break
        if a == "--fs-root" and i + 1 < len(argv):
            found = argv[i + 1]
        elif a.startswith("--fs-root="):
            found = a[len("--fs-root="):]
    return found


class _Root:
    def __init__(self, watch):
        self.watch = watch
        self.token: tuple | None = None  # the stat-cache file the last snapshot saved
        self.dirty: set[bytes] = set()  # directories changed since that snapshot began
        self.busy = False
        self.used = time.monotonic()

    def drain(self) -> None:
        changed = self.watch.changed()
        if changed is None:
            self.token = None  # events were lost: the next snapshot walks
        else:
            self.dirty |= changed


class Watched:
    """One snapshot's share of a watch: what it starts from, and what it must restore."""

    def __init__(self, root: bytes, state: _Root | None, token, dirty: set[bytes]):
        self.root, self.state, self.token, self.dirty = root, state, token, dirty

    def hint(self, report_fd: int) -> "Hint":
        return Hint(self.root, self.token, frozenset(self.dirty), report_fd)


class Watches:
    """The server's watches, by sandbox (real absolute path, bytes)."""

    def __init__(self, git_dir: bytes):
        self.git_dir = os.path.realpath(git_dir)
        self.by_root: dict[bytes, _Root] = {}

    def roots(self) -> list[bytes]:
        return sorted(self.by_root)

    def before(self, argv: list[str], cwd: str) -> Watched | None:
        """Called before a command forks: for a snapshot of a sandbox, its watch (started now
        when there is none: this snapshot walks, the next one need not)."""
        arg = fs_root_arg(argv)
        if arg is None:
            return None
        root = os.fsencode(os.path.realpath(os.path.join(cwd, arg)))
        if not os.path.isdir(root):
            return None
        state = self.by_root.get(root)
        if state is None:
            state = self._add(root)
            if state is None:
                return Watched(root, None, None, set())
        state.drain()
        state.used = time.monotonic()
        if state.busy:  # two snapshots of one sandbox at once: this one walks and reports nothing
            return Watched(root, None, None, set())
        state.busy = True
        out = Watched(root, state, state.token, state.dirty)
        state.dirty = set()  # from now on: what changed since this snapshot began
        return out

    def _add(self, root: bytes) -> _Root | None:
        from ...core.fswatch import DirWatch

        if len(self.by_root) >= MAX_ROOTS:
            oldest = min(self.by_root, key=lambda r: self.by_root[r].used)
            self.by_root.pop(oldest).watch.close()
        watch = DirWatch(root, {self.git_dir})
        if watch.fd < 0:
            return None
        state = self.by_root[root] = _Root(watch)
        return state

    def after(self, watched: Watched | None, report: bytes) -> None:
        """The snapshot's child ended; ``report``: the lines it wrote to the report pipe."""
        if watched is None or watched.state is None:
            return
        state = watched.state
        state.busy = False
        token = None
        for line in report.split(b"\n"):
            parts = line.split()
            if len(parts) == 5 and parts[0] == b"saved" and bytes.fromhex(parts[1].decode()) == watched.root:
                try:
                    token = tuple(int(p) for p in parts[2:])
                except ValueError:
                    token = None
        if token is not None:
            state.token = token  # the changes since it began stay in state.dirty
        else:  # it saved nothing we know of: keep what it started from
            state.dirty |= watched.dirty

    def close_fds(self) -> None:
        """In a forked child: the watches are the server's."""
        for state in self.by_root.values():
            if state.watch.fd >= 0:
                os.close(state.watch.fd)
                state.watch.fd = -1


class Hint:
    """In the snapshot's child: what the server's watcher says about one sandbox."""

    def __init__(self, root: bytes, token, dirty: frozenset, report_fd: int):
        self.root, self.token, self.dirty, self.report_fd = root, token, dirty, report_fd


def _identity(path) -> tuple | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def load(root: bytes, path, load_cache):
    """``(cache, unchanged)`` for a capture of ``root``: ``load_cache()``'s stat cache and, when
    the server's watcher vouches for it, the test of directories nothing changed in (else None)."""
    hint = HINT
    if hint is None or hint.root != root or hint.token is None:
        return load_cache(), None
    before = _identity(path)
    cache = load_cache()
    if before != hint.token or _identity(path) != before or not cache.old:
        return cache, None
    from ...core.fswatch import unchanged_test

    return cache, unchanged_test(set(hint.dirty))


def saved(root: bytes, path) -> None:
    """After the stat cache of ``root`` was saved: tell the server which file it is."""
    hint = HINT
    if hint is None or hint.root != root:
        return
    ident = _identity(path)
    if ident is not None:
        try:
            os.write(hint.report_fd, b"saved %s %d %d %d\n" % (root.hex().encode(), *ident))
        except OSError:
            pass
