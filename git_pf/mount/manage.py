"""Mounting and unmounting images: the decisions behind ``git pf mount`` / ``umount``.

Checks the mountpoint, picks the state to resume (the same image at the
same directory after a crash or an unmount that kept changes) or creates a
new one, starts the daemon, and on unmount detaches the kernel mount and
drops the state unless its upper layer holds changes.
"""
from __future__ import annotations

import os
import time

from git_pf.core import liveness
from git_pf.mount import mounts
from git_pf.image import refs, verify
from git_pf.core.errors import UsageError
from git_pf.mount.mounts import MountState

from . import daemon

EXIT_WAIT = 10.0


def branch_of(git, rev: str, image_id: str) -> str | None:
    """``rev`` when it names a branch whose tip is the image (a mount snapshot advances it)."""
    try:
        return rev if refs.branch_tip(git, rev) == image_id else None
    except Exception:
        return None


def _check_mountpoint(repo, mp: str, force: bool = False) -> None:
    git_real = os.path.realpath(repo.git_dir)
    if mp == git_real or mp.startswith(git_real + os.sep):
        raise UsageError(f"cannot mount inside the git directory: '{mp}'")
    if any(s.status() == "stale" for s in mounts.for_mountpoint(repo.git_dir, mp)):
        raise UsageError(f"'{mp}' has a stale mount (its daemon died); run 'git pf umount {mp}' first")
    if mounts.is_mounted(mp):
        raise UsageError(f"'{mp}' is already a git-pf mount (see 'git pf mounts'; 'git pf umount' it first)")
    if not os.path.lexists(mp):
        if not os.path.isdir(os.path.dirname(mp)):
            raise UsageError(f"cannot mount at '{mp}': its parent directory does not exist")
        os.mkdir(mp)
    elif not os.path.isdir(mp) or os.path.islink(mp):
        raise UsageError(f"cannot mount at '{mp}': not a directory")
    elif not force:
        _check_empty(mp)


def _check_empty(mp: str) -> None:
    """A mount hides what its directory holds: refuse a non-empty one (as checkout --into does)."""
    try:
        with os.scandir(mp) as it:
            empty = next(it, None) is None
    except OSError as e:
        raise UsageError(f"cannot mount at '{mp}': {e.strerror or e}") from None
    if not empty:
        raise UsageError(f"cannot mount at '{mp}': it is not empty (use --force to mount over its contents, "
                         f"which hides them while mounted)")


def _state_for(repo, mp: str, image: str, mode: str, branch: str | None) -> tuple[MountState, list[str]]:
    """The state to resume, or a new one; plus warnings about other states kept for ``mp``."""
    notes, chosen = [], None
    for s in mounts.for_mountpoint(repo.git_dir, mp):
        if s.status() != "unmounted":
            raise UsageError(f"'{mp}' has a stale mount (its daemon died); run 'git pf umount {mp}' first")
        if chosen is None and s.image == image and s.mode == mode:
            chosen = s
        elif s.mode == "ro" or mounts.upper_is_empty(s):
            mounts.discard(s)
        else:
            notes.append(f"kept the changes of an earlier mount of {s.image[:12]} at '{mp}' "
                         f"(state {s.id}); mount that image there to resume them")
    if chosen is not None:
        chosen.branch = chosen.branch or branch
        return chosen, notes
    return mounts.create(repo.git_dir, image, mp, mode, branch), notes


def mount(repo, rev: str, directory, rw: bool = False, foreground: bool = False,
          branch: str | None = None, force: bool = False) -> tuple[MountState, list[str]]:
    image = repo.resolve(rev)
    verify.check_use(repo.git, image.id, rev)
    branch = branch or branch_of(repo.git, rev, image.id)
    mp = mounts.canonical(directory)
    _check_mountpoint(repo, mp, force)
    state, notes = _state_for(repo, mp, image.id, "rw" if rw else "ro", branch)
    try:
        return daemon.start(str(repo.git_dir), state, foreground), notes
    except BaseException:
        if not mounts.is_mounted(mp) and (state.mode == "ro" or mounts.upper_is_empty(state)):
            mounts.discard(state)  # a mount that never started leaves nothing behind
        raise


def umount(repo, directory, discard: bool = False) -> MountState:
    """Unmount ``directory``; returns its state (whose ``dir`` still exists when changes were kept)."""
    mp = mounts.canonical(directory)
    states = mounts.for_mountpoint(repo.git_dir, mp)
    live = [s for s in states if s.status() != "unmounted"]
    if not live:
        if discard and states:
            for s in states:
                mounts.discard(s)
            return states[0]
        raise UsageError(f"'{directory}' is not a git-pf mount of this repository (see 'git pf mounts')")
    state = live[0]
    if state.status() == "mounted":
        mounts.unmount(mp)
        _wait_exit(state.pid)
    else:
        mounts.unmount(mp, lazy=True)
    if discard or (state.dir.exists() and (state.mode == "ro" or mounts.upper_is_empty(state))):
        mounts.discard(state)
    return state


def _wait_exit(pid: int) -> None:
    deadline = time.monotonic() + EXIT_WAIT
    while liveness.pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)


def fork_and_mount(repo, rev: str, n: int, prefix: str | None, explore: str | None, directory,
                   force: bool = False) -> list:
    """Fork ``rev`` and mount each fork copy-on-write at ``directory/<fork name>``: one daemon per
    fork, all reading the same git object database and side store. Every mount point is checked
    before any fork is written. Returns ``[(fork, state)]``."""
    from git_pf.ops import fork as fork_mod

    base = mounts.canonical(directory)
    if not os.path.isdir(base) and not os.path.isdir(os.path.dirname(base)):
        raise UsageError(f"--mount: parent directory of '{directory}' does not exist")
    if not force:
        for name in fork_mod.planned_names(repo, rev, n, prefix):
            mp = os.path.join(base, name)
            if os.path.isdir(mp) and not os.path.islink(mp) and not mounts.is_mounted(mp):
                _check_empty(mp)
    forks = repo.fork(rev, n, prefix, explore)
    if not os.path.isdir(base):
        os.mkdir(base)
    out = []
    for f in forks:
        state, _ = mount(repo, f.id, os.path.join(base, f.name), rw=True, branch=f.name, force=force)
        out.append((f, state))
    return out
