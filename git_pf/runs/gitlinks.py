"""Git directories a world links to outside itself, made private for an isolated run.

A world may hold a ``.git`` file (a linked work tree's or a submodule's ``gitdir:`` link), a
``.git`` symlink, or a git directory whose ``commondir`` file names another one: git commands
the agent runs there act on the directory named, outside the world. ``links`` lists them from
the image's world tree, before anything is written; ``outside_maybe`` says from that alone
which may name a directory outside the world (a run then needs a mount namespace);
``private_dirs`` resolves them as the agent will see them (the world shown at the recorded
path, symlinks followed through it: read from the image's tree, ``InImage``, before the world
is written, so that an odd link is refused before anything is, and from the world checked out,
``OnDisk``, as the agent starts) and returns the git directories to overlay. In the run's
mount namespace each becomes an overlay whose upper layer lies on a tmpfs private to that
namespace (``child.isolated``), so the agent's commits, index and ref updates succeed there and
vanish with it. A named path that is not there is left alone (git finds no repository there, as
it would anywhere); one that is there but is not a git directory of this user (another user's,
``/etc``, a plain directory) is refused in one line, and so is a git directory, outside the
world or in it (its config then a ``worktree`` link of the image), whose ``core.worktree``
names a directory outside the world (git, finding that directory through a ``.git`` file or
in it, takes it as the work tree and would write there). A git directory's ``config`` (or
``config.worktree``) that is a symlink is followed as git follows it: in the world, its
``core.worktree`` is checked as well; outside it, it must lie at the top of a git directory of
this user, which is overlaid too (``git config`` there writes through the symlink), else the
world is refused. The text of a link comes from the
image, possibly fetched: it is only read, never followed to write. Writes nothing.
"""
from __future__ import annotations

import os
import posixpath
import stat
import subprocess
from dataclasses import dataclass

from ..core.errors import DataError, PfError
from ..image.safepath import from_tree
from ..image.tree import MODE_LINK, MODE_TREE, read_blob, read_tree

MAX_LINK = 4096  # a link's text, read from the image
MAX_CONFIG = 1 << 20  # a git directory's config in the world, read from the image
MAX_HOPS = 40  # symlinks followed resolving one path, as the kernel allows
# overlayfs takes its directories in one option string, where these separate or escape
UNSAFE_CHARS = (",", ":", "\\", "\n")
SYMLINKS = ("symlink", "configlink")  # links that are symlinks of the world, named relative to where they are


@dataclass(frozen=True)
class Link:
    """One link in the world: ``path`` (world-relative, ``/``-separated), ``kind`` (``gitdir``: a
    ``.git`` file; ``symlink``: a ``.git`` symlink; ``commondir``: a git directory's
    ``commondir`` file; ``worktree``: a ``core.worktree`` in a git directory's ``config`` or
    ``config.worktree``; ``configlink``: such a config that is a symlink) and the path it names
    (``target``, as written; relative to the link's directory, or to its git directory for
    ``commondir`` and ``worktree``)."""

    path: str
    kind: str
    target: str


def links(git, image: str) -> tuple[Link, ...]:
    """The git links in ``image``'s world (reading trees and only the links' own blobs, and the
    config files of its git directories)."""
    from .stepworld import world_tree

    out: list[Link] = []
    todo: list[tuple[str, bytes]] = [("", bytes.fromhex(world_tree(git, image)))]
    while todo:
        rel, oid = todo.pop()
        entries = [(from_tree(tname), mode, child) for tname, mode, child in read_tree(git, oid)]
        gitdir = any(name == b"HEAD" for name, _, _ in entries)  # a commondir file counts only in a git directory
        for name, mode, child in entries:
            path = posixpath.join(rel, os.fsdecode(name))
            if mode == MODE_TREE:
                todo.append((path, child))
            elif gitdir and name in (b"config", b"config.worktree") and mode == MODE_LINK:
                link = _link(git, path, "configlink", child)
                if link is not None:
                    out.append(link)
            elif gitdir and name in (b"config", b"config.worktree"):
                out += [Link(path, "worktree", tree) for tree in _config_work_trees(git, path, child)]
            elif name == b".git" or (name == b"commondir" and gitdir and mode != MODE_LINK):
                kind = "symlink" if mode == MODE_LINK else "gitdir" if name == b".git" else "commondir"
                link = _link(git, path, kind, child)
                if link is not None:
                    out.append(link)
    return tuple(sorted(out, key=lambda l: l.path))


def _link(git, path: str, kind: str, oid: bytes) -> Link | None:
    try:
        data = read_blob(git, oid, MAX_LINK, "a git link's length")
    except DataError:
        raise PfError(f"the world's git link '{path}' is longer than {MAX_LINK} bytes: refusing to run "
                      f"where git could follow it", 2) from None
    text = os.fsdecode(data) if kind in SYMLINKS else os.fsdecode(data.split(b"\n", 1)[0]).strip()
    if kind == "gitdir":
        if not text.startswith("gitdir:"):
            return None  # not a link: git refuses such a .git file
        text = text[len("gitdir:"):].strip()
    return Link(path, kind, text) if text else None


def _config_work_trees(git, path: str, oid: bytes) -> list[str]:
    try:
        data = read_blob(git, oid, MAX_CONFIG, "a git config's length")
    except DataError:
        raise PfError(f"the world's git config '{path}' is longer than {MAX_CONFIG} bytes: refusing to run "
                      f"where git could read it", 2) from None
    return work_trees(data, path)


def work_trees(config: bytes, where: str) -> list[str]:
    """Every ``core.worktree`` in the git config ``config`` (the file ``where``), read as git's
    setup reads them (no includes): git takes the last as the work tree of a git directory found
    through a ``.git`` file, or one it is in, relative to that directory."""
    try:
        proc = subprocess.run(["git", "config", "-z", "--file", "-", "--get-all", "core.worktree"], input=config,
                              capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        proc = None
    if proc is None or proc.returncode not in (0, 1):  # 1: no such key
        raise PfError(f"the git config '{where}' cannot be read: refusing to run where git would read it", 2)
    return [os.fsdecode(v) for v in proc.stdout.split(b"\0") if v]


def _named(link: Link, shown: str) -> str:
    """The path ``link`` names, in the agent's view where the world is at ``shown`` (``..`` as the
    kernel takes it: after the symlinks before it, ``resolve``)."""
    where = posixpath.join(shown, link.path)
    return where if link.kind in SYMLINKS else posixpath.join(posixpath.dirname(where), link.target)


def outside_maybe(found: tuple[Link, ...], root: str | None) -> Link | None:
    """The first of ``found`` that may name a directory outside the world, read from the links
    alone (an absolute path not under the recorded ``root``, or a relative one that climbs out);
    None when none may."""
    shown = "/pf-world"
    for link in found:
        if link.kind in SYMLINKS and not link.target.startswith("/"):
            named = posixpath.normpath(posixpath.join(shown, posixpath.dirname(link.path), link.target))
        else:
            named = posixpath.normpath(_named(link, shown))
        if not (_under(named, shown) or (root and _under(named, root))):
            return link
    return None


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


class OnDisk:
    """A world checked out at ``at``: its symlinks are read there."""

    def __init__(self, at: str):
        self.at = os.path.realpath(at)

    def readlink(self, rel: str) -> str | None:
        path = os.path.join(self.at, rel)
        return os.readlink(path) if os.path.islink(path) else None

    def read(self, rel: str, link: Link) -> bytes | None:
        """The file ``rel`` of the world (a symlink there not followed); None when it is no file."""
        return _read_config(link, os.path.join(self.at, rel))


class InImage:
    """The world of ``image`` as it will be at ``at`` once checked out (nothing there yet): its
    symlinks are read from the image's tree."""

    def __init__(self, git, image: str, at: str):
        from .stepworld import world_tree

        self.git, self.at = git, os.path.realpath(at)
        self._trees: dict[str, dict | None] = {}
        self._root = bytes.fromhex(world_tree(git, image))

    def _tree(self, rel: str) -> dict | None:
        """The entries (name -> (mode, oid)) of the world's directory ``rel``; None when it is none."""
        if rel not in self._trees:
            if not rel:
                oid = self._root
            else:
                parent, name = posixpath.split(rel)
                entry = (self._tree(parent) or {}).get(os.fsencode(name))
                oid = entry[1] if entry is not None and entry[0] == MODE_TREE else None
            self._trees[rel] = None if oid is None else {
                from_tree(tname): (mode, child) for tname, mode, child in read_tree(self.git, oid)}
        return self._trees[rel]

    def readlink(self, rel: str) -> str | None:
        parent, name = posixpath.split(rel)
        entry = (self._tree(parent) or {}).get(os.fsencode(name))
        if entry is None or entry[0] != MODE_LINK:
            return None
        try:
            return os.fsdecode(read_blob(self.git, entry[1], MAX_LINK, "a symbolic link's length"))
        except DataError:
            raise PfError(f"the world's symbolic link '{rel}' is longer than {MAX_LINK} bytes", 2) from None

    def read(self, rel: str, link: Link) -> bytes | None:
        """The file ``rel`` of the world, from the image; None when it is no file."""
        parent, name = posixpath.split(rel)
        entry = (self._tree(parent) or {}).get(os.fsencode(name))
        if entry is None or entry[0] in (MODE_LINK, MODE_TREE):
            return None
        try:
            return read_blob(self.git, entry[1], MAX_CONFIG, "a git config's length")
        except DataError:
            raise _odd(link, rel, f"a git config longer than {MAX_CONFIG} bytes") from None


def resolve(path: str, shown: str, world) -> str:
    """``path`` (absolute) with every symlink followed as the agent sees the file system: the
    world (``OnDisk`` or ``InImage``) at ``shown`` and at its own path. A path of that view;
    PfError after ``MAX_HOPS`` symlinks."""
    todo = [c for c in path.split("/") if c]
    done, hops = "/", 0
    while todo:
        c = todo.pop(0)
        if c == ".":
            continue
        if c == "..":
            done = posixpath.dirname(done)
            continue
        nxt = posixpath.join(done, c)
        target = _readlink(nxt, shown, world)
        if target is None:
            done = nxt
            continue
        hops += 1
        if hops > MAX_HOPS:
            raise PfError(f"too many symbolic links resolving '{path}'", 2)
        todo = [x for x in target.split("/") if x] + todo
        if target.startswith("/"):
            done = "/"
    return done


def _readlink(path: str, shown: str, world) -> str | None:
    """The target of ``path`` when it is a symlink in the agent's view; None when it is not."""
    for top in (shown, world.at):
        if _under(path, top):
            rel = path[len(top):].lstrip("/")
            return world.readlink(rel) if rel else None
    return os.readlink(path) if os.path.islink(path) else None


def private_dirs(found: tuple[Link, ...], world, shown: str) -> list[str]:
    """The directories outside the world that git commands in it would write, to overlay in the
    run's namespace (none inside another); the world (``OnDisk``, ``InImage``, or the path of a
    checked-out one) is at ``shown`` in the agent's view. PfError (exit 2) for a link naming
    something there that is not a git directory of this user, or one whose ``core.worktree``
    names a directory outside the world."""
    view = world if isinstance(world, (OnDisk, InImage)) else OnDisk(world)
    world, dirs = view.at, set()

    def inside(p: str) -> bool:
        return _under(p, shown) or _under(p, world)

    def check_config(link: Link, path: str, gitdir: str) -> None:
        """The config ``path`` (its symlinks followed) of the git directory ``gitdir``, as git there
        reads and writes it: one outside the world must lie in a git directory of this user (then
        overlaid too), and no core.worktree in it may name a directory outside the world."""
        if inside(path):
            data = view.read(path[len(shown if _under(path, shown) else world):].lstrip("/"), link)
        elif not os.path.lexists(path):
            return  # git reads no config there
        else:
            dirs.add(_git_dir(link, posixpath.dirname(path)))
            data = _read_config(link, path)
        for tree in work_trees(data or b"", path):
            tree = resolve(posixpath.join(gitdir, tree), shown, view)
            if not inside(tree) and os.path.lexists(tree):
                raise _odd(link, gitdir, f"its core.worktree names '{tree}', a work tree outside the world "
                                         f"that git there would write")

    for link in found:
        named = resolve(_named(link, shown), shown, view)
        if link.kind == "configlink":  # followed as git follows it
            check_config(link, named, posixpath.dirname(posixpath.join(shown, link.path)))
            continue
        if inside(named) or not os.path.lexists(named):
            continue  # the world is private already; git finds no repository where nothing is
        if link.kind == "worktree":
            raise _odd(link, named, f"the core.worktree of the world's git directory "
                                    f"'{posixpath.dirname(link.path)}', a work tree git there would write")
        if link.kind == "commondir":
            dirs.add(_git_dir(link, named, common=True))
            continue
        gitdir = _git_dir(link, named)
        dirs.add(gitdir)
        try:
            with open(os.path.join(gitdir, "commondir")) as f:
                common = f.read().strip()
        except FileNotFoundError:  # no common directory: git takes this one's core.worktree
            for name in ("config", "config.worktree"):
                check_config(link, resolve(posixpath.join(gitdir, name), shown, view), gitdir)
            continue
        except (OSError, UnicodeDecodeError):
            raise _odd(link, os.path.join(gitdir, "commondir"), "an unreadable commondir") from None
        if common:
            common = resolve(posixpath.join(gitdir, common), shown, view)
            if not inside(common):
                dirs.add(_git_dir(link, common, common=True))
    top = sorted(dirs)
    out = [d for d in top if not any(d != o and _under(d, o) for o in top)]
    for d in out:
        if inside(d) or _under(world, d) or _under(shown, d):
            raise _odd(found[0], d, "a directory that holds the world")
        if any(ch in d for ch in UNSAFE_CHARS):
            raise _odd(found[0], d, "a path holding ',', ':', '\\' or a newline, which an overlay cannot take")
    return out


def _git_dir(link: Link, path: str, common: bool = False) -> str:
    """``path`` when it is a git directory of this user (HEAD, and for a common directory
    ``objects`` and ``refs``); else PfError naming the link."""
    try:
        st = os.stat(path)
    except OSError:
        raise _odd(link, path, "a path that cannot be read") from None
    if not stat.S_ISDIR(st.st_mode):
        raise _odd(link, path, "not a directory")
    if st.st_uid != os.geteuid():
        raise _odd(link, path, "another user's directory")
    need = ("objects", "refs") if common else ("HEAD",)
    if not all(os.path.exists(os.path.join(path, n)) for n in need):
        raise _odd(link, path, "not a git directory")
    return path


def _read_config(link: Link, path: str) -> bytes | None:
    """The git config file ``path`` (no symlink: resolved before); None when nothing is there.
    PfError for what git could not read as a file: unreadable, no regular file, too long."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError:
        raise _odd(link, path, "a git config that cannot be read") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _odd(link, path, "a git config that is no regular file")
        data = f.read(MAX_CONFIG + 1)
    if len(data) > MAX_CONFIG:
        raise _odd(link, path, f"a git config longer than {MAX_CONFIG} bytes")
    return data


def _odd(link: Link, path: str, what: str) -> PfError:
    return PfError(f"the world's git link '{link.path}' names '{path}', outside the world: {what}; refusing to "
                   f"run where git there could change it (give --no-isolate to run anyway)", 2)
