"""Snapshotting a mount: the mounted image's world edited with only what the upper layer holds.

``MountWorld`` is a ``snapshot.WorldSource``: it starts from the mounted
image's ``world/fs`` tree and ``fs.attrs``, walks the upper layer (whiteouts
remove lower paths, upper files replace or add entries, upper directories
are merged into their lower counterparts), and reads only the files found
there. Upper entries new to the image that the ``.gitignore`` files (as the
mount shows them) ignore are left out, by the same rules as an ``--fs-root``
capture (``world.ignore``), and stay in the upper layer. Untouched subtrees
keep their ids. ``clear_upper`` then empties the
upper layer in a crash-safe order once the mount follows the new image.
Never touches the mountpoint itself and never imports pyfuse3.
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import stat
from typing import Callable

import pygit2

from ..core import config, interrupts, liveness
from ..image import manifest as img, refs
from . import mounts
from ..core.errors import UsageError
from ..image.tree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, blob_size, over_limit, read_blob, read_pointer, read_tree
from .mounts import WHITEOUT_PREFIX, MountState
from ..ops.snapshot import SnapshotResult, take
from ..layers.world import attrs as attrs_mod
from ..layers.world.attrs import DEFAULT_DIR_MODE, PathAttrs
from ..layers.world.capture import Capture, CaptureStats, entry_reader
from ..layers.world.ignore import ALWAYS_IGNORED_TOP, IgnoreRules
from ..layers.world.names import to_tree
from ..layers.world.restore import iter_world
from ..layers.world.xattrs import read_user_xattrs

_WH = os.fsencode(WHITEOUT_PREFIX)


class MountWorld:
    """The world of a mount: its lower image plus its upper layer."""

    def __init__(self, state: MountState):
        self.state = state
        self.name = os.path.basename(state.mountpoint) or state.mountpoint
        self.captured: Callable[[], None] | None = None  # called once the upper layer is read
        self.ignored: set[bytes] = set()  # upper paths the ignore rules left out: they stay in the upper layer

    def capture(self, repo, parent) -> Capture:
        git = repo.git
        lower = img.read_image(git, self.state.image)
        world = img.subtree(git, lower.tree, img.WORLD_FS)
        attrs = attrs_mod.decode(img.read_file(git, lower.tree, img.WORLD_ATTRS) or b"")
        builder = _Builder(repo, attrs, lower.manifest.get("layers", {}).get("world", {}))
        tree = builder.dir(os.fsencode(self.state.upper), b"", bytes.fromhex(world) if world else None, IgnoreRules())
        if tree is None:
            tree = builder.reader.writer.write([])
        self.ignored = builder.ignored
        if self.captured is not None:
            self.captured()
        return Capture(tree.hex(), list(builder.attrs.values()) + builder.reader.attrs, builder.stats())

    def done(self, cap: Capture) -> None:
        pass


class _Builder:
    def __init__(self, repo, attrs: dict[bytes, PathAttrs], totals: dict):
        self.git: pygit2.Repository = repo.git
        self.reader = entry_reader(repo.git, repo.store, config.large_file_threshold(repo.git))
        self.attrs = attrs
        self.files = totals.get("files", 0)
        self.bytes = totals.get("bytes", 0)
        self.pointers = totals.get("pointers", 0)
        self.ignored: set[bytes] = set()

    def stats(self) -> CaptureStats:
        read = self.reader.stats
        return CaptureStats(self.files + read.files, self.bytes + read.bytes, self.pointers + read.pointers,
                            read.files_read, read.skipped)

    def dir(self, abs_dir: bytes, rel: bytes, base: bytes | None, rules: IgnoreRules) -> bytes | None:
        """The new tree of one merged directory; None when it ends up empty. ``rules``: the ignore
        rules that apply in it, before its own ``.gitignore``."""
        entries = {n: (m, o) for n, m, o in read_tree(self.git, base)} if base else {}
        names = sorted(os.listdir(abs_dir))
        for name in names:
            if name.startswith(_WH):
                real = name[len(_WH):]
                self._drop(_join(rel, real), entries.pop(to_tree(real), None))
        rules = self._rules(abs_dir, rel, rules, entries)
        for name in names:
            if name.startswith(_WH):
                continue
            path, child = os.path.join(abs_dir, name), _join(rel, name)
            st = os.lstat(path)
            tname = to_tree(name)
            if tname not in entries and ((not rel and name in ALWAYS_IGNORED_TOP)
                                         or rules.ignored(child, stat.S_ISDIR(st.st_mode))):
                self.ignored.add(child)  # new and ignored: left out, as a full snapshot leaves it out
                continue
            old = entries.pop(tname, None)
            if stat.S_ISDIR(st.st_mode):
                keep = old is not None and old[0] == MODE_TREE
                if old is not None and not keep:  # a file replaced by a directory
                    self._drop(child, old)
                self.attrs.pop(child, None)
                sub = self.dir(path, child, old[1] if keep else None, rules)
                self._dir_attrs(path, child, st, sub is None)
                if sub is not None:
                    entries[tname] = (MODE_TREE, sub)
                continue
            self._drop(child, old)
            entry = self.reader.leaf(path, child, name, st)
            if entry is not None:
                entries[tname] = (entry[1], entry[2])
        if not entries:
            return None
        return self.reader.writer.write((n, m, o) for n, (m, o) in entries.items())

    def _rules(self, abs_dir: bytes, rel: bytes, rules: IgnoreRules, lower: dict) -> IgnoreRules:
        """``rules`` plus the directory's ``.gitignore`` as the mount shows it: the upper layer's
        regular file, else the image's (``lower``: the entries not whited out)."""
        path = os.path.join(abs_dir, b".gitignore")
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            return rules.descend(abs_dir, rel) if stat.S_ISREG(st.st_mode) else rules
        old = lower.get(b".gitignore")
        attr = self.attrs.get(_join(rel, b".gitignore"))
        if old is None or old[0] not in (MODE_FILE, MODE_EXEC) or (attr is not None and attr.pointer) \
                or over_limit(blob_size(self.git, old[1])):  # one too large to read is left out, as git does
            return rules
        return rules.with_file(rel, read_blob(self.git, old[1]))

    def _drop(self, rel: bytes, old: tuple[int, bytes] | None) -> None:
        """Forget a lower path (and, for a directory, everything below it)."""
        if old is not None and old[0] == MODE_TREE:
            for sub_rel, mode, oid in iter_world(self.git, old[1], rel):
                self._subtract(mode, oid, self.attrs.get(sub_rel))
        elif old is not None:
            self._subtract(old[0], old[1], self.attrs.get(rel))
        attr = self.attrs.pop(rel, None)
        if (old is not None and old[0] == MODE_TREE) or (attr is not None and attr.is_dir):
            prefix = rel + b"/"
            for key in [k for k in self.attrs if k.startswith(prefix)]:
                del self.attrs[key]

    def _subtract(self, mode: int, oid: bytes, attr: PathAttrs | None) -> None:
        self.files -= 1
        if mode == MODE_LINK:
            return
        if attr is not None and attr.pointer:
            try:
                self.bytes -= read_pointer(self.git, oid).size
                self.pointers -= 1
                return
            except ValueError:
                pass
        self.bytes -= blob_size(self.git, oid)

    def _dir_attrs(self, path: bytes, rel: bytes, st: os.stat_result, empty: bool) -> None:
        perm = stat.S_IMODE(st.st_mode)
        xattrs = read_user_xattrs(path)
        special = perm != DEFAULT_DIR_MODE
        if empty or special or xattrs:
            self.attrs[rel] = PathAttrs(rel, is_dir=True, mode=perm if special else None, xattrs=xattrs)


def _join(rel: bytes, name: bytes) -> bytes:
    return rel + b"/" + name if rel else name


def clear_upper(state: MountState, keep: set[bytes] = frozenset()) -> None:
    """Empty the upper layer once the mount follows an image that holds its changes.

    ``keep``: relative paths of files still open and of entries the ignore rules left
    out of the image, which stay (with their directories), as do fifos, sockets and devices, which no image records. Whiteouts go first, so at every instant the view is
    the new image's world."""
    root = os.fsencode(state.upper)
    keep = set(keep)
    for base, dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            if name.startswith(_WH):
                os.unlink(path)
            elif _special(path):  # not in any image: it stays in the upper layer to stay in the mount
                keep.add(os.path.relpath(path, root))
    keep_dirs = {k.rsplit(b"/", 1)[0] for k in keep if b"/" in k}
    keep_dirs |= {d.rsplit(b"/", i)[0] for d in list(keep_dirs) for i in range(1, d.count(b"/") + 1)}
    _clear(root, b"", keep, keep_dirs)


def _special(path: bytes) -> bool:
    mode = os.lstat(path).st_mode
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode))


def _clear(abs_dir: bytes, rel: bytes, keep: set[bytes], keep_dirs: set[bytes]) -> None:
    for name in os.listdir(abs_dir):
        path, child = os.path.join(abs_dir, name), _join(rel, name)
        if child in keep:
            continue
        if child in keep_dirs:
            _clear(path, child, keep, keep_dirs)
        elif os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)


def pick_state(git_dir, directory) -> MountState:
    """The mount state to snapshot for ``directory``: the live mount, else the one retained."""
    mp = mounts.canonical(directory)
    states = mounts.for_mountpoint(git_dir, mp)
    live = [s for s in states if s.status() == "mounted"]
    if live:
        return live[0]
    if len(states) == 1:
        return states[0]
    if not states:
        raise UsageError(f"'{directory}' is not a git-pf mount of this repository (see 'git pf mounts')", param="directory")
    raise UsageError(f"'{directory}' has {len(states)} retained upper layers; mount the image to resume first", param="directory")


def _branch(repo, state: MountState, name: str | None) -> str:
    if name or state.branch:
        return name or state.branch
    current = refs.current_branch(repo.git)
    if current and refs.branch_tip(repo.git, current) == state.image:
        return current
    raise UsageError(f"the mounted image {state.image[:12]} is not the tip of a branch; pass --name BRANCH")


def snapshot_mount(repo, directory, *, name: str | None = None, ignore=(), **inputs) -> SnapshotResult:
    """Snapshot a mount: a new image whose parent is the mounted image; the mount then follows it.
    ``inputs`` are ``Repo.snapshot``'s layer inputs and options."""
    from ..ops.snapshot_inputs import request

    if ignore:
        raise UsageError("--ignore does not apply to --mount (a mount snapshot applies the .gitignore files the mount shows)")
    state = pick_state(repo.git_dir, directory)
    base = request(state.mountpoint, name=name and refs.check_name(name), **inputs)
    world = MountWorld(state)

    def take_now(image: str, captured=None) -> SnapshotResult:
        state.image = image
        world.captured = captured
        return take(repo, dataclasses.replace(base, world=world, parent=image, branch=_branch(repo, state, name)))

    if state.status() != "mounted":  # nothing serves the upper layer: work on it directly
        result = take_now(state.image)
        state.image = result.image.id
        state.save(durable=True)
        clear_upper(state, world.ignored)
        return result
    ctl = mounts.Control(state, timeout=120.0)
    held = interrupts.Deferred()  # from the end of the capture until the mount follows the new image
    try:
        try:
            frozen = ctl.ask({"op": "freeze"})
        except mounts.DaemonLost as e:
            raise mounts.DaemonLost(f"{e.message}; no image was written") from None
        try:
            result = take_now(frozen["image"], held.start)
        except BaseException:
            ctl.try_ask({"op": "thaw"})  # a daemon that is gone needs no thaw
            raise
        _switch(ctl, state, result, world.ignored)
        return result
    finally:
        ctl.close()
        held.end()


def _switch(ctl: mounts.Control, state: MountState, result: SnapshotResult, keep: set[bytes]) -> None:
    """Have the daemon follow the new image, keeping the ignored upper paths ``keep``. When it has
    ended meanwhile, do its part here (the upper layer then has no other user) and say so: the
    image is whole and on its branch."""
    new = result.image.id
    try:
        ctl.ask({"op": "switch", "image": new, "keep": sorted(os.fsdecode(k) for k in keep)})
        return
    except mounts.DaemonLost as e:
        if liveness.pid_alive(state.pid):
            raise mounts.DaemonLost(f"{e.message}; image {new[:12]} was written on '{result.branch}', "
                                    f"but the mount may not follow it (see 'git pf mounts')") from None
    state.image = new
    state.save(durable=True)
    clear_upper(state, keep)
    raise mounts.DaemonLost(f"the daemon of the mount at '{state.mountpoint}' ended during the snapshot; image "
                            f"{new[:12]} holds its changes and is on '{result.branch}'; run 'git pf umount "
                            f"{state.mountpoint}', then mount '{result.branch}' again")
