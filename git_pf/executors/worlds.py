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

``WorldCache`` keeps such directories between commands (``replay`` and ``run``; docs/record.md,
"The world cache"): a directory with its record is renamed into the cache when a command ends, and
the next command that needs a world of the same tree renames it out (only one can) and moves it
back to a fresh checkout as above.
"""
from __future__ import annotations

import hashlib
import marshal
import os
import secrets
import stat
import tempfile
import time
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

    def __init__(self, repo, home: Path | None = None):
        self.repo = repo
        self.home = home  # a directory of the caller's that holds the world (WorldCache's); None: a temporary one
        self.tmp: Path | None = home
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
            self._empty()
            fresh_world(self.repo, image, self.world)
            self.key, self.tree = key, info.tree
            try:
                self.known = walk(os.fsencode(self.world))
            except OSError:  # a world we cannot walk (a directory of mode 000): never moved
                self.known = None
        if self.known is not None:
            self._mark()
        return self.world

    def _empty(self) -> None:
        """An empty directory for a fresh checkout: a new temporary one, or ``home`` emptied."""
        if self.home is None:
            self.close()
            self.tmp = Path(tempfile.mkdtemp(prefix="pf-fanout-"))
            return
        self.forget()
        self.known = self.key = self.tree = self.plan = None
        for e in os.scandir(self.home):
            remove_tree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)

    def forget(self) -> None:
        """Drop the stat cache of the world's directory (its path is about to change or go)."""
        from ..layers.world.statcache import StatCache

        StatCache.forget(self.repo.git_dir, os.fsencode(os.path.realpath(self.world)))

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


def _state(known: dict[bytes, _Path]) -> dict[bytes, tuple]:
    return {rel: tuple(p) for rel, p in known.items()}


class WorldCache:
    """Worlds kept between commands (docs/record.md, "The world cache"): ``take(image, check)``
    gives a ReusedWorld holding ``image``'s world, brought back from a cached one when one of
    its tree is there (taken by renaming it, so no two commands ever share one), else checked
    out; ``keep(worlds)`` puts it back, its record written before it is renamed into the cache.
    At most ``size`` worlds are kept; the oldest go first."""

    def __init__(self, repo, size: int):
        self.repo = repo
        self.size = size
        self.root = cache_dir(repo)

    @classmethod
    def of(cls, repo) -> "WorldCache | None":
        """The repository's cache, or None when ``pf.worldCache.maxWorlds`` is 0 (or false)."""
        size = max_worlds(repo)
        return cls(repo, size) if size > 0 else None

    def _key(self, image: str) -> str:
        git = self.repo.git
        tree = bytes.fromhex(img.read_image(git, image).tree)
        key = [lookup(git, tree, path) for path in (img.WORLD_FS, img.WORLD_ATTRS)]
        return hashlib.sha256(repr(key).encode()).hexdigest()[:32]

    def take(self, image: str, check):
        """``(worlds, check(world directory))``: a ReusedWorld in a directory of its own, the world's
        directory there (empty, or a cached world) named to ``check`` before anything is written
        (what it raises removes the directory, and the cache's when empty), then
        ``worlds.enter(image)`` makes it the world. When the cache's directory is not this user's
        own, the ReusedWorld's is a new temporary one (``keep`` then removes it)."""
        if not (_own_dir(self.root.parent) and _own_dir(self.root)):
            worlds = ReusedWorld(self.repo, home=Path(tempfile.mkdtemp(prefix="pf-world-")))
            os.mkdir(worlds.world)
            try:
                return worlds, check(worlds.world)
            except BaseException:
                remove_tree(worlds.tmp)
                raise
        key = self._key(image)
        live = self.root / f"{_LIVE}{os.getpid()}.{secrets.token_hex(6)}"
        state = None
        for entry in sorted(self.root.glob(f"{key}.*"), reverse=True):  # newest first
            try:
                os.rename(entry, live)  # atomic: another command that renames it first has it
            except OSError:
                continue
            state = _load(live / _RECORD)
            _unlink(live / _RECORD)
            break
        else:
            os.mkdir(live, 0o700)
        worlds = ReusedWorld(self.repo, home=live)
        if state is not None:
            worlds.key, worlds.tree, worlds.known = state
        else:
            _empty_dir(live)
        os.makedirs(worlds.world, exist_ok=True)
        try:
            return worlds, check(worlds.world)
        except BaseException:
            remove_tree(live)
            for d in (self.root, self.root.parent):  # made for this command: nothing of it stays
                try:
                    os.rmdir(d)
                except OSError:
                    pass
            raise

    def keep(self, worlds: ReusedWorld) -> None:
        """Put ``worlds``'s directory into the cache (or remove it, when it has no record)."""
        live = worlds.home
        worlds.forget()
        if live.parent != self.root:  # a temporary directory (``take``)
            worlds.close()
            return
        if worlds.known is None or worlds.key is None:
            remove_tree(live)
            return
        part = live / (_RECORD + ".part")
        try:
            with open(part, "wb") as f:
                f.write(marshal.dumps((_FORMAT, worlds.key, worlds.tree, _state(worlds.known))))
                f.flush()
                os.fsync(f.fileno())
            os.rename(part, live / _RECORD)  # the record is whole or absent
            os.rename(live, self.root / f"{self._key_of(worlds)}.{time.time_ns():020d}.{secrets.token_hex(4)}")
        except OSError:  # a full disk, the cache removed under us: the world is not kept
            remove_tree(live)
            return
        self.trim(self.size)

    def _key_of(self, worlds: ReusedWorld) -> str:
        return hashlib.sha256(repr(list(worlds.key)).encode()).hexdigest()[:32]

    def drop(self, worlds: ReusedWorld) -> None:
        """Remove ``worlds``'s directory (a command that failed: nothing of it is kept)."""
        worlds.forget()
        remove_tree(worlds.tmp)

    @staticmethod
    def clear(repo) -> int:
        """Remove every cached world of ``repo`` (``git pf gc``), whatever the settings; those in use stay
        (and the repository's directory in the cache, once empty)."""
        root = cache_dir(repo)
        removed = trim(root, 0)
        try:
            os.rmdir(root)
        except OSError:  # absent, or a command's world is in it
            pass
        return removed

    def trim(self, size: int) -> int:
        """Keep the ``size`` newest cached worlds; remove the rest, and the directories of commands
        that are gone. How many were removed."""
        return trim(self.root, size)


_LIVE, _RECORD, _FORMAT = "live.", ".record", 1


def cache_dir(repo) -> Path:
    """Where the repository's cached worlds are: in the temporary directory, one directory per user
    and repository (a world inside the git directory could not be captured: docs/world.md)."""
    git_dir = os.path.realpath(repo.git_dir)
    return (Path(tempfile.gettempdir()) / f"pf-worlds-{os.getuid()}"
            / hashlib.sha256(os.fsencode(git_dir)).hexdigest()[:24])


def max_worlds(repo) -> int:
    """``pf.worldCache.maxWorlds``: how many worlds the cache keeps (default 2; 0 or false: none)."""
    from ..core import config
    from ..core.errors import UsageError

    value = config.get_str(repo.git, "pf.worldCache.maxWorlds")
    if value is None:
        return DEFAULT_WORLDS
    if value.strip().lower() in ("false", "no", "off"):
        return 0
    try:
        size = int(value)
    except ValueError:
        size = -1
    if size < 0:
        raise UsageError("pf.worldCache.maxWorlds must be a number of worlds (0 or false: no cache)")
    return size


DEFAULT_WORLDS = 2


def _own_dir(path: Path) -> bool:
    """Make ``path`` when absent; whether it is a directory of this user that no one else may enter."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and st.st_mode & 0o077 == 0


def _load(path: Path):
    """A cached world's record, or None (absent, damaged, of another format)."""
    try:
        fmt, key, tree, known = marshal.loads(path.read_bytes())
        if fmt != _FORMAT:
            return None
        return tuple(key), tree, {rel: _Path(*p) for rel, p in known.items()}
    except (OSError, ValueError, EOFError, TypeError):
        return None


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _empty_dir(path: Path) -> None:
    for e in os.scandir(path):
        remove_tree(e.path) if e.is_dir(follow_symlinks=False) else os.unlink(e.path)


def trim(root: Path, size: int) -> int:
    """Keep the ``size`` newest cached worlds under ``root``; remove the others and every directory
    of a command that is gone (a ``live.<pid>.`` one whose process is not running)."""
    from ..core.liveness import pid_alive

    if not root.is_dir():
        return 0
    removed = 0
    kept = sorted((e for e in os.scandir(root) if not e.name.startswith(_LIVE)),
                  key=lambda e: e.name.split(".")[1] if e.name.count(".") >= 2 else "", reverse=True)
    gone = kept[size:]
    for e in os.scandir(root):
        if e.name.startswith(_LIVE):
            pid = e.name[len(_LIVE):].split(".")[0]
            if not pid.isdigit() or not pid_alive(int(pid)):
                gone.append(e)
    for e in gone:
        dead = root / f"{_LIVE}dead.{secrets.token_hex(6)}"
        try:
            os.rename(e.path, dead)  # no command takes it while it goes
        except OSError:
            continue
        remove_tree(dead)
        removed += 1
    return removed
