"""One world directory reused by the items a worker runs one after another (docs/scale.md, "One
world per worker"): a fan-out's forks of one image start from the same world, so the first is
checked out and each next one gets the directory back as a fresh checkout leaves it, by moving
only what the item before changed.

After the world is made, every path in it is recorded: its kind and the lstat fields that move
whenever its content, mode, xattrs or links do (inode, mode, size, mtime, ctime), and for a
directory its xattrs too. Bringing it back walks the directory: a path the world lacks is removed
(whatever wrote it: an ignored file, a fifo, a directory), a file or symlink whose fields moved is
removed and written again from the image (``restore``, as a checkout writes it), a directory
whose fields moved gets its recorded mode and xattrs back, and whatever is missing is written. A
path whose ctime falls in the clock tick of the mark the recording ends with is "racy" (as in
git: a change within that tick would leave its fields alike) and counts as changed. The walk
after a move must find every recorded path with its kind, mode, size (a directory: xattrs), and
nothing else, or the world is checked out afresh in a new directory; so is a world of another
tree, or one that cannot be walked. The directory beside the world (``tmp``) is emptied too. A
process the item left running would change the next item's world: the caller ends them first
(``fanout`` kills CMD's process group when CMD exits).
"""
from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from typing import NamedTuple

from ..core.errors import DataError
from ..image import manifest as img, verify
from ..image.safepath import World, validate_image
from ..image.tree import lookup
from ..layers.world.restore import restore
from ..layers.world.xattrs import read_all_xattrs
from ..runs.replaying import fresh_world, remove_tree, remove_world

_DIR, _FILE, _LINK, _OTHER = "dir", "file", "symlink", "other"
_MARK = ".mark"


class _Path(NamedTuple):
    kind: str
    mode: int  # st_mode
    size: int  # 0 for a directory (its size moves with what it held)
    fields: tuple | None  # (ino, mode, size, mtime_ns, ctime_ns); None: racy, counts as changed
    xattrs: dict | None  # a directory's, every namespace; None for the rest


def _kind(mode: int) -> str:
    return _DIR if stat.S_ISDIR(mode) else _FILE if stat.S_ISREG(mode) else _LINK if stat.S_ISLNK(mode) else _OTHER


def _fields(st: os.stat_result) -> tuple:
    return st.st_ino, st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _join(root: bytes, rel: bytes) -> bytes:
    return root + b"/" + rel if rel else root


def _record(path: bytes, st: os.stat_result) -> _Path:
    kind = _kind(st.st_mode)
    return _Path(kind, st.st_mode, 0 if kind == _DIR else st.st_size, _fields(st),
                 read_all_xattrs(path) if kind == _DIR else None)


def walk(root: bytes) -> dict[bytes, _Path]:
    """Every path under ``root`` (``b""``: root itself), recorded; never follows a symlink."""
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode):
        raise NotADirectoryError(os.fsdecode(root))
    out = {b"": _record(root, st)}
    stack = [b""]
    while stack:
        rel = stack.pop()
        with os.scandir(_join(root, rel)) as entries:
            for e in entries:
                child = rel + b"/" + e.name if rel else e.name
                out[child] = _record(e.path, e.stat(follow_symlinks=False))
                if out[child].kind == _DIR:
                    stack.append(child)
    return out


def _outline(known: dict[bytes, _Path]) -> dict[bytes, tuple]:
    """What a checkout decides of each path: what the walk after a move must find again."""
    return {rel: (p.kind, p.mode, p.size, p.xattrs) for rel, p in known.items()}


class ReusedWorld:
    """A world directory for items run one after another: ``enter(image)`` gives the directory
    holding ``image``'s world, exactly as a checkout writes it; ``close()`` removes it."""

    def __init__(self, repo):
        self.repo = repo
        self.tmp: Path | None = None
        self.key = None  # the world's tree and attrs blob, of what ``known`` records
        self.known: dict[bytes, _Path] | None = None
        self.tree: str | None = None  # the image tree the world was checked out of
        self.plan: World | None = None  # its world validated, read when a path is written again
        self.moved = 0  # worlds brought back by moving what changed (the others were checked out)

    @property
    def world(self) -> Path:
        return self.tmp / "world"

    def __enter__(self) -> "ReusedWorld":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.tmp is not None:
            remove_world(self.repo, self.tmp, self.world)
            self.tmp = self.known = self.key = self.tree = self.plan = None

    def enter(self, image: str) -> Path:
        """The world of ``image`` (a commit id), in this object's directory."""
        git = self.repo.git
        info = img.read_image(git, image)
        key = (lookup(git, bytes.fromhex(info.tree), img.WORLD_FS), lookup(git, bytes.fromhex(info.tree),
                                                                         img.WORLD_ATTRS))
        moved = False
        if self.known is not None and key == self.key:
            verify.check_use(git, info.id, image)  # as the checkout it stands for
            try:
                moved = self._move()
            except (OSError, DataError):  # an unwritable leftover, an object missing: checked out afresh
                moved = False
        if moved:
            self.moved += 1
        else:
            self.close()
            self.tmp = Path(tempfile.mkdtemp(prefix="pf-fanout-"))
            fresh_world(self.repo, image, self.world)
            self.key, self.tree = key, info.tree
            try:
                self.known = walk(os.fsencode(self.world))
            except OSError:  # a world we cannot walk (a directory of mode 000): never moved
                self.known = None
        if self.known is not None:
            self._mark()
        return self.world

    def _mark(self) -> None:
        """End the recording: a path whose ctime is the mark's (the same clock tick) is racy."""
        mark = self.tmp / _MARK
        try:
            os.utime(mark, follow_symlinks=False)  # its ctime: now
        except FileNotFoundError:
            os.close(os.open(mark, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600))
        now = os.lstat(mark).st_ctime_ns
        self.known = {rel: p._replace(fields=None) if p.fields is not None and p.fields[4] >= now else p
                      for rel, p in self.known.items()}

    def _move(self) -> bool:
        """Bring the directory back to the world ``known`` records; False when the result is not it."""
        for e in os.scandir(self.tmp):  # the item's own files beside the world (its output, anything it wrote)
            if not (e.name == "world" and e.is_dir(follow_symlinks=False)
                    or e.name == _MARK and e.is_file(follow_symlinks=False)):
                remove_tree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)
        root = os.fsencode(self.world)
        known = self.known
        seen: set[bytes] = set()
        opened: dict[bytes, _Path] = {}  # directories whose mode and xattrs are set back at the end

        def open_dir(rel: bytes, st: os.stat_result | None = None) -> None:
            """Make sure this process may list and change the directory ``rel``."""
            mode = (st or os.lstat(_join(root, rel))).st_mode
            if rel not in opened:
                opened[rel] = known[rel]
            if mode & 0o700 != 0o700:
                os.chmod(_join(root, rel), stat.S_IMODE(mode) | 0o700)

        if not stat.S_ISDIR(os.lstat(root).st_mode):
            return False
        stack = [b""]
        while stack:
            rel = stack.pop()
            path = _join(root, rel)
            st = os.lstat(path)
            seen.add(rel)
            if known[rel].fields is None or _fields(st) != known[rel].fields or st.st_mode & 0o700 != 0o700:
                open_dir(rel, st)
            with os.scandir(path) as entries:
                found = [(e.name, e.stat(follow_symlinks=False)) for e in entries]
            for name, cst in found:
                child = rel + b"/" + name if rel else name
                want = known.get(child)
                kind = _kind(cst.st_mode)
                if want is not None and want.kind == kind:
                    if kind == _DIR:
                        stack.append(child)
                        continue
                    if want.fields is not None and _fields(cst) == want.fields:
                        seen.add(child)
                        continue
                open_dir(rel)  # a path to remove: the walk afterwards checks the result
                if kind == _DIR:
                    remove_tree(_join(root, child))
                else:
                    os.unlink(_join(root, child))
        missing = {rel for rel in known if rel not in seen}
        if not missing and not opened:  # every path as recorded, nothing else there: nothing to check
            return True
        if missing:
            for rel in missing:
                parent = rel.rpartition(b"/")[0]
                if parent in seen:
                    open_dir(parent)
            plan = self._plan()
            restore(self.repo.git, self.repo.store,
                    World([e for e in plan.entries if e[0] in missing], plan.kinds,
                          {rel: a for rel, a in plan.attrs.items() if rel in missing}), root)
        for rel, was in sorted(opened.items(), key=lambda item: -len(item[0])):  # deepest first
            path = _join(root, rel)
            have = read_all_xattrs(path)
            for name in have.keys() - was.xattrs.keys():
                os.removexattr(path, name, follow_symlinks=False)
            for name, value in was.xattrs.items():
                if have.get(name) != value:
                    os.setxattr(path, name, value, follow_symlinks=False)
            if os.lstat(path).st_mode != was.mode:  # else its ctime stays: it is not racy next time
                os.chmod(path, stat.S_IMODE(was.mode))
        now = walk(root)
        if _outline(now) != _outline(known):
            return False
        self.known = now
        return True

    def _plan(self) -> World:
        if self.plan is None:
            self.plan = validate_image(self.repo.git, self.tree)
        return self.plan
