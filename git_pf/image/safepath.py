"""Path safety: which names and paths an image may hold, and the one writer of image content.

Image data is untrusted. ``validate_world`` walks a world tree once and checks
every tree name (``name_problem`` / ``tree_name_problem``) and every
``fs.attrs.jsonl`` path (``relpath_problem`` plus the kind of every prefix),
and that every tree is in git's order, before anything is written; a
refused world is a ``DataError`` naming the bad path (docs/format.md
"Names"; docs/security.md "Paths"). ``check_world`` makes the same checks
without listing the world, for merges and fsck: a tree found sound once in
a process is not read again, so the worlds of one merge cost what they do
not share, and a merge marks the world roots it found sound in
``$GIT_DIR/pf/sound-trees`` (``markfile``) so later merges, in any process,
skip them (fsck reads every tree regardless); a snapshot of a directory marks
the world it built itself (``mark_sound``). ``SafeDir``
writes under one directory by ``openat``-style descent, never opening a path
through a symlink it created or found. Writes nothing outside the directory a
``SafeDir`` is given. Knows the world's tree format (names are escaped as
``to_tree`` / ``from_tree`` say) but imports no layer: the attrs file is parsed by the
reader its layer registers. ``resolve_fs_root`` refuses a sandbox path that cannot be captured.
"""
from __future__ import annotations

import errno
import os
import re
import threading
from array import array
from bisect import bisect_right
from collections import OrderedDict
from dataclasses import dataclass, field
from itertools import accumulate
from operator import add
from pathlib import Path
from typing import Any

import pygit2

from . import manifest as img
from ..core.errors import DataError, UsageError
from .tree import MODE_EXEC, MODE_FILE, MODE_LINK, MODE_TREE, read_tree
from ..core.markfile import MarkFile

DIR, FILE, LINK = "dir", "file", "symlink"
_FILE_MODES = {MODE_FILE: FILE, MODE_EXEC: FILE, 0o100664: FILE, MODE_LINK: LINK, MODE_TREE: DIR}
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_DIR_FDS = 64  # directory descriptors a SafeDir keeps open


# The escaping of sandbox file names that git trees may not hold: git refuses a tree entry
# named ``.git`` (any case), so such a name is stored as ``.pf-esc-`` + name; a name that
# already starts with ``.pf-esc-`` is escaped the same way, so the mapping is a bijection
# (docs/format.md). ``tree_path`` / ``real_path`` apply it to each component of a path.
ESCAPE_PREFIX = b".pf-esc-"


def to_tree(name: bytes) -> bytes:
    if name[:1] == b"." and (name.lower() == b".git" or name.startswith(ESCAPE_PREFIX)):
        return ESCAPE_PREFIX + name
    return name


def from_tree(name: bytes) -> bytes:
    if name.startswith(ESCAPE_PREFIX):
        return name[len(ESCAPE_PREFIX) :]
    return name


def tree_path(real: bytes) -> bytes:
    """A sandbox path as the world tree stores it (each component escaped)."""
    return b"/".join(to_tree(c) for c in real.split(b"/"))


def real_path(tree: bytes) -> bytes:
    """A world tree path as the sandbox names it (each component unescaped)."""
    return b"/".join(from_tree(c) for c in tree.split(b"/"))


def show(path: bytes) -> str:
    """``path`` as printable one-line text (for messages)."""
    text = path.decode("utf-8", "backslashreplace")
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def name_problem(name: bytes) -> str | None:
    """Why ``name`` cannot be one component of a sandbox path, or None."""
    if not name:
        return "an empty name"
    if name in (b".", b".."):
        return f"a '{name.decode()}' component"
    if b"/" in name:
        return "a name containing '/'"
    if b"\0" in name:
        return "a name containing NUL"
    return None


def tree_name_problem(tname: bytes) -> str | None:
    """Why ``tname`` cannot be an entry of a world tree (as stored, and once unescaped), or None."""
    problem = name_problem(tname)
    if problem is None and tname.lower() == b".git":
        problem = "a raw .git entry (a sandbox .git is stored escaped)"
    if problem is None and tname.startswith(ESCAPE_PREFIX) and to_tree(from_tree(tname)) != tname:
        problem = "an escaped name that is not canonical"
    return problem  # a canonical escaped name unescapes to .git or to another escaped name: valid names


def relpath_problem(path: bytes) -> str | None:
    """Why ``path`` is not a safe relative path (``/``-separated, every component a valid name), or None."""
    if path.startswith(b"/"):
        return "an absolute path"
    for part in path.split(b"/"):
        problem = name_problem(part)
        if problem:
            return problem
    return None


def check_relpath(path: bytes, where: str) -> bytes:
    problem = relpath_problem(path)
    if problem:
        raise DataError(f"{where}: unsafe path '{show(path)}' ({problem})")
    return path


@dataclass
class World:
    """A validated world: its non-tree entries (real path, mode, raw oid) in tree order,
    the kind of every path in the tree, and its attrs."""

    entries: list[tuple[bytes, int, bytes]] = field(default_factory=list)
    kinds: dict[bytes, str] = field(default_factory=dict)
    attrs: dict[bytes, Any] = field(default_factory=dict)


def _directory(git, oid: bytes, rel_dir: bytes):
    """``(real path, kind, mode, raw oid)`` of each entry of the world tree ``oid`` at ``rel_dir``,
    in tree order, after every check a single tree allows: names as stored and unescaped,
    canonical escaping, git's order, no name twice, a known mode. DataError on the first
    bad entry."""
    seen: set[bytes] = set()
    last = b""
    for tname, mode, child in read_tree(git, oid):
        if tname[:1] == b"." or not tname or b"/" in tname or b"\0" in tname:  # most names are none of these
            problem = tree_name_problem(tname)
            if problem:
                where = rel_dir + b"/" + tname if rel_dir else tname
                raise DataError(f"{img.WORLD_FS.decode()}: unsafe name '{show(where)}' ({problem})")
            name = from_tree(tname)
        else:
            name = tname
        key = tname + b"/" if mode == MODE_TREE else tname
        if key < last:  # git's merge asserts on such a tree; git fsck calls it treeNotSorted
            where = rel_dir + b"/" + tname if rel_dir else tname
            raise DataError(f"{img.WORLD_FS.decode()}: '{show(where)}' is out of git's order in its tree")
        last = key
        rel = rel_dir + b"/" + name if rel_dir else name
        if name in seen:
            raise DataError(f"{img.WORLD_FS.decode()}: '{show(rel)}' appears twice in one directory")
        seen.add(name)
        kind = _FILE_MODES.get(mode)
        if kind is None:
            raise DataError(f"{img.WORLD_FS.decode()}: '{show(rel)}' has unsupported mode {mode:o}")
        yield rel, kind, mode, child


def validate_world(git, tree_hex: str | None, attrs: dict[bytes, Any]) -> World:
    """Walk ``world/fs`` once and check it and its attrs; DataError naming the first bad path.
    The result lists the world (what a checkout writes)."""
    world = World(attrs=attrs)
    stack = [(b"", bytes.fromhex(tree_hex))] if tree_hex else []
    while stack:
        rel_dir, oid = stack.pop()
        subtrees = []
        for rel, kind, mode, child in _directory(git, oid, rel_dir):
            world.kinds[rel] = kind
            if kind == DIR:
                subtrees.append((rel, child))
            else:
                world.entries.append((rel, mode, child))
        stack.extend(reversed(subtrees))
    _check_attrs(attrs, world.kinds.get)
    return world


# Trees found sound by ``check_world`` in this process: a tree's soundness is a property of its
# content, so the worlds of one merge (ours, theirs, the result) walk only what they do not share.
_SOUND_TREES: set[bytes] = set()
_SOUND_LIMIT = 1 << 20
# The world roots found sound, kept per repository across processes (docs/security.md, "Sound
# trees"). The version in the header changes whenever the name rules do, so old marks go unread.
# A snapshot marks the world it builds without reading it (``mark_sound``): a change of the name
# rules must change how a capture names entries too (and the stat cache's format, whose trees a
# capture reuses), or a capture could mark a name the new rules refuse.
SOUND_HEADER = b"pf-sound-trees 1\n"
_SOUND_LINE = re.compile(rb"^([0-9a-f]{40}|[0-9a-f]{64})$")
_SOUND_FILES: dict[str, MarkFile[str]] = {}


def _parse_sound(line: bytes) -> str | None:
    return line.decode() if _SOUND_LINE.match(line) else None


def sound_marks(git) -> MarkFile[str]:
    """The persistent sound-tree marks of ``git``'s repository (hex tree ids)."""
    found = _SOUND_FILES.get(git.path)
    if found is None:
        path = os.path.join(git.path, "pf", "sound-trees")
        found = _SOUND_FILES[git.path] = MarkFile(Path(path), SOUND_HEADER, _parse_sound, lambda t: f"{t}\n".encode())
    return found


# The fast check of one tree (``_plain_subtrees``): entries whose mode a world may hold and
# whose name needs neither a check nor unescaping (not empty, no '/', not '.', '..', a raw .git
# in any case, nor an escaped name), matched by the regular expression engine without a Python
# step per entry. A tree the expression does not tile from its first byte to its last goes to
# ``_directory``, which accepts what else is valid and names what is not.
_PLAIN_NAME = rb"((?:[^\0/.]|\.(?!\.?\0|[gG][iI][tT]\0|pf-esc-))[^\0/]*)"
_PLAIN_FILE = rb"(?:100644|100755|100664|120000) "
_PLAIN_LEAF = re.compile(_PLAIN_FILE + _PLAIN_NAME + rb"\0.{20}", re.S)  # a tree holding no tree
_PLAIN_ENTRY = re.compile(rb"(?:(40000 )|" + _PLAIN_FILE + rb")" + _PLAIN_NAME + rb"\0(.{20})", re.S)


class _Shape:
    """What the fast check learnt of a sound tree: its bytes, where each entry ends, and the
    (index, name) of each subtree. A tree of the same length whose bytes differ only inside
    object ids has the same entries (modes, names, order), so it passes the checks of one tree."""

    __slots__ = ("data", "ends", "trees", "_num")

    def __init__(self, data: bytes, ends: array, trees: list[tuple[int, bytes]]):
        self.data, self.ends, self.trees, self._num = data, ends, trees, None

    def oid(self, data: bytes, k: int) -> bytes:
        """The object id of entry ``k`` in ``data`` (this tree's bytes or a like-shaped tree's)."""
        return data[self.ends[k] - 20 : self.ends[k]]

    def same_entries(self, data: bytes) -> bool:
        """Whether ``data`` differs from this tree's bytes only inside object ids."""
        return self.differing(data) is not None

    def differing(self, data: bytes) -> list[int] | None:
        """The entries whose object ids differ in ``data``, in order, when ``data`` differs from
        this tree's bytes only inside object ids; None when it differs anywhere else."""
        if len(data) != len(self.data):
            return None
        if self._num is None:  # this tree's bytes as one integer, made once: it is compared again and again
            self._num = int.from_bytes(self.data, "little")
        x = int.from_bytes(data, "little") ^ self._num
        base, ends, out = 0, self.ends, []
        while x:  # one step per differing entry: the lowest differing byte must lie in an id
            j = base + (((x & -x).bit_length() - 1) >> 3)
            k = bisect_right(ends, j)
            if j < ends[k] - 20:
                return None
            out.append(k)
            x >>= 8 * (ends[k] - base)
            base = ends[k]
        return out


def _plain_shape(data: bytes) -> _Shape | None:
    """The shape of the tree whose raw bytes are ``data`` when every entry is plain
    (``_PLAIN_ENTRY``), the entries are in git's order and no name is there twice; None when
    anything else holds (``_directory`` then decides)."""
    if b"40000 " not in data:  # every tree entry starts with these bytes: no subtree here
        names, trees = _PLAIN_LEAF.findall(data), []
        ends = array("I", map(add, accumulate(map(len, names)), range(28, 28 * len(names) + 1, 28)))  # 6-digit modes
        if (ends[-1] if ends else 0) != len(data) or names != sorted(names):  # entries that match, and
            return None  # nothing between them: they add up to the whole tree
    else:
        parts = _PLAIN_ENTRY.split(data)  # [gap, "40000 " or None, name, oid, gap, ...]
        gaps, kinds, names = parts[0::4], parts[1::4], parts[2::4]
        keys = [n + b"/" if t else n for t, n in zip(kinds, names)]  # git's order sorts a tree as NAME/
        if any(gaps) or keys != sorted(keys):
            return None
        trees = [(k, n) for k, (t, n) in enumerate(zip(kinds, names)) if t]
        ends = array("I", accumulate(len(n) + (27 if t else 28) for t, n in zip(kinds, names)))
    if len(set(names)) != len(names):
        return None
    return _Shape(data, ends, trees)


# Shapes of trees that passed the fast check in this process, so that a tree of another world
# at the same path (theirs', the merge result's) is compared with its counterpart instead of
# being parsed; bounded by the bytes they hold.
_SHAPES: dict[bytes, _Shape] = {}
_SHAPE_BYTES = [0]
_SHAPE_LIMIT = 32 << 20


def _tree_bytes(git, oid: bytes) -> bytes | None:
    """The raw bytes of tree ``oid`` (None: the object is no tree)."""
    kind, data = git.odb.read(pygit2.Oid(raw=oid))
    return data if kind == pygit2.enums.ObjectType.TREE else None


# Shapes read from trees as they are, with no check (``counterpart_shape``): the check uses one
# only for a counterpart, a tree it found at the same path of a world found sound or marked.
_ANY_ENTRY = re.compile(rb"[^\0]*\0.{20}", re.S)
_READ_AS_IS: dict[bytes, _Shape] = {}


def counterpart_shape(git, oid: bytes) -> _Shape | None:
    """The shape (where each entry ends, which are subtrees) of tree ``oid`` as git holds it,
    remembered; None when it is no tree or its bytes do not tile into entries. Checks nothing:
    a check takes it only where ``oid`` is a counterpart, a tree at the same path of a world
    found sound or marked, whose entries a tree of another world is compared with (a merge
    reads ours' trees so to list the changes to git's merged world). Cheaper than the fast check's parse."""
    found = _SHAPES.get(oid) or _READ_AS_IS.get(oid)
    if found is None:
        data = _tree_bytes(git, oid)
        if data is None:
            return None
        entries = _ANY_ENTRY.findall(data)
        ends = array("I", accumulate(map(len, entries)))
        if (ends[-1] if ends else 0) != len(data):
            return None
        trees = [(k, e[6:-21]) for k, e in enumerate(entries) if e[:6] == b"40000 "] if b"40000 " in data else []
        found = _READ_AS_IS[oid] = _Shape(data, ends, trees)
        _SHAPE_BYTES[0] += len(data)
    return found


def _shape_of(git, oid: bytes, data: bytes | None = None) -> _Shape | None:
    found = _SHAPES.get(oid)
    if found is None:
        if data is None:
            data = _tree_bytes(git, oid)
            if data is None:
                return None
        found = _plain_shape(data)
        if found is not None:
            _remember(oid, found)
    return found


def _remember(oid: bytes, shape: _Shape) -> None:
    if _SHAPE_BYTES[0] > _SHAPE_LIMIT:
        _SHAPES.clear()
        _READ_AS_IS.clear()
        _SHAPE_BYTES[0] = 0
    _SHAPES[oid] = shape
    _SHAPE_BYTES[0] += len(shape.data)


def _subtrees(git, oid: bytes, rel_dir: bytes,
              likes: tuple[bytes, ...]) -> list[tuple[bytes, bytes, tuple[bytes, ...]]]:
    """``(relative path, raw oid, counterparts)`` of each subtree of world tree ``oid`` at
    ``rel_dir`` that may not be sound yet, once the tree passed every check of ``_directory``
    (DataError naming the first bad entry). ``likes`` are the sound trees at the same path of
    other worlds (ours', theirs'): a subtree one of them holds under the same name is sound,
    and those they hold under a name still to check are its counterparts."""
    data = _tree_bytes(git, oid)
    if data is None:
        return [(rel, child, ()) for rel, kind, _, child in _directory(git, oid, rel_dir) if kind == DIR]
    shape = None
    for like in likes:
        other = _SHAPES.get(like) or _READ_AS_IS.get(like)  # a counterpart parsed already
        if other is not None and other.same_entries(data):
            shape = _Shape(data, other.ends, other.trees)  # the entries of ``like``, with other ids
            _remember(oid, shape)
            break
    else:
        shape = _shape_of(git, oid, data)
        if shape is None:
            return [(rel, child, ()) for rel, kind, _, child in _directory(git, oid, rel_dir) if kind == DIR]
    prefix = rel_dir + b"/" if rel_dir else b""
    pending = [(name, shape.oid(data, k)) for k, name in shape.trees]
    was: list[dict[bytes, bytes]] = []
    for like in likes:  # read one after the other, and only while a subtree is left to match
        if not pending:
            break
        other = _READ_AS_IS.get(like) or _shape_of(git, like)
        if other is None:
            continue
        held = {name: other.oid(other.data, k) for k, name in other.trees}
        pending = [(name, child) for name, child in pending if held.get(name) != child]
        was.append(held)
    return [(prefix + name, child, tuple(c for h in was if (c := h.get(name)) is not None))
            for name, child in pending]


def _is_sound(tree: bytes, marks: MarkFile[str] | None) -> bool:
    return tree in _SOUND_TREES or (marks is not None and tree.hex() in marks)


def _check_tree(git, root: bytes, marks: MarkFile[str] | None, likes: tuple[bytes, ...] = ()) -> None:
    """Check the world tree ``root``; ``likes``, world roots already found sound (or marked),
    lend their trees as counterparts (a subtree one of them holds at the same path is not read,
    and a tree of the same entries as its counterpart is compared, not parsed)."""
    if _is_sound(root, marks):
        _SOUND_TREES.add(root)
        return
    likes = tuple(like for like in likes if _is_sound(like, marks))  # only a sound tree's subtrees are sound
    visited = []
    stack = [(b"", root, likes)]
    while stack:  # iterative: a hostile tree may nest deeper than Python's recursion limit
        rel_dir, oid, was = stack.pop()
        if oid in _SOUND_TREES:
            continue
        visited.append(oid)
        stack.extend(_subtrees(git, oid, rel_dir, was))
    if len(_SOUND_TREES) + len(visited) > _SOUND_LIMIT:
        _SOUND_TREES.clear()
    _SOUND_TREES.update(visited)  # the whole world passed: every tree of it is sound
    if marks is not None:
        marks.add(root.hex())


def is_sound(git, tree_hex: str) -> bool:
    """Whether world tree ``tree_hex`` was found sound in this process or is marked sound."""
    return _is_sound(bytes.fromhex(tree_hex), sound_marks(git))


def mark_sound(git, tree: bytes) -> None:
    """Mark the world tree ``tree`` sound without reading it: only for a tree its maker built
    itself from names it listed and escaped (``to_tree``), or reused from a world built so, as
    a snapshot of a directory does (docs/security.md, "Sound trees"); never for a tree that
    came from a remote, a mount's image or anything else another person wrote. One line
    appended to the repository's marks, once per tree and process."""
    _SOUND_TREES.add(tree)
    sound_marks(git).add(tree.hex())


def forget_sound_trees() -> None:
    """Forget which trees were found sound in this process, and their shapes (benchmarks measure
    a fresh process's checks; the persistent marks stay, ``prune_sound_trees`` drops them)."""
    _SOUND_TREES.clear()
    _SHAPES.clear()
    _READ_AS_IS.clear()
    _SHAPE_BYTES[0] = 0


def prune_sound_trees(git, keep=None) -> None:
    """Rewrite the persistent marks with those whose tree is still in the repository (gc), or
    those ``keep`` accepts."""
    odb = git.odb
    sound_marks(git).prune(keep or (lambda t: t in odb))


def check_tree(git, tree_hex: str, likes: tuple[str, ...] = ()) -> None:
    """``check_world``'s checks of the world tree alone, before its attrs exist (a merge checks
    git's merged world once it has listed its changes, which read its trees and ours' at the same
    paths); ``likes`` as for ``check_world``."""
    _check_tree(git, bytes.fromhex(tree_hex), sound_marks(git), tuple(bytes.fromhex(t) for t in likes if t))


def check_world(git, tree_hex: str | None, attrs: dict[bytes, Any], persistent: bool = True,
                likes: tuple[str, ...] = ()) -> None:
    """``validate_world``'s checks without listing the world: subtrees already found sound in
    this process are not read again, nor (``persistent``) world roots marked sound by an earlier
    process, nor the subtrees it shares at the same path with the worlds ``likes`` (world roots
    found sound or marked, others ignored; their trees are compared with this world's at the
    same paths), and only the paths the attrs name are looked up."""
    if tree_hex:
        _check_tree(git, bytes.fromhex(tree_hex), sound_marks(git) if persistent else None,
                    tuple(bytes.fromhex(t) for t in likes if t))
    _check_attrs(attrs, _Kinds(git, tree_hex).of)


class _Kinds:
    """The kind of a path of a world tree, looked up on demand (directories read once)."""

    def __init__(self, git, tree_hex: str | None):
        self.git = git
        self.root = bytes.fromhex(tree_hex) if tree_hex else None
        self.listings: dict[bytes, dict[bytes, tuple[int, bytes]]] = {}

    def _listing(self, oid: bytes) -> dict[bytes, tuple[int, bytes]]:
        found = self.listings.get(oid)
        if found is None:
            found = self.listings[oid] = {name: (mode, child) for name, mode, child in read_tree(self.git, oid)}
        return found

    def of(self, path: bytes) -> str | None:
        oid, mode = self.root, MODE_TREE
        for part in path.split(b"/"):
            if oid is None or mode != MODE_TREE:
                return None
            mode, oid = self._listing(oid).get(to_tree(part), (None, None))
        return _FILE_MODES.get(mode) if oid is not None else None


def _check_attrs(attrs: dict[bytes, Any], kind_of) -> None:
    """Every attrs path against the world's kinds (``kind_of(path)``: DIR, FILE, LINK or None)."""
    where = img.WORLD_ATTRS.decode()
    attr_dirs = {p for p, e in attrs.items() if e.is_dir}
    for path, entry in attrs.items():
        check_relpath(path, where)
        parts = path.split(b"/")
        for i in range(1, len(parts)):
            prefix = b"/".join(parts[:i])
            kind = kind_of(prefix) or (DIR if prefix in attr_dirs else None)
            if kind is None and entry.is_dir:
                continue  # a directory recorded only here: its parents are made with it
            if kind != DIR:
                raise DataError(f"{where}: '{show(path)}' lies under '{show(prefix)}', "
                                f"which is {'a ' + kind if kind else 'not a directory'} of the world")
        kind = kind_of(path)
        if entry.is_dir and kind not in (None, DIR):
            raise DataError(f"{where}: '{show(path)}' is recorded as a directory but is a {kind} in the tree")
        if entry.pointer and kind != FILE:
            raise DataError(f"{where}: '{show(path)}' is marked as a pointer but is not a regular file")
        if kind == LINK and (entry.mode is not None or entry.xattrs):
            raise DataError(f"{where}: '{show(path)}' is a symlink and may not carry a mode or xattrs")


def _image_world(git, tree_hex: str) -> tuple[str | None, dict]:
    from .layercheck import PARSERS  # the attrs file's reader, registered by its layer

    attrs = PARSERS[img.WORLD_ATTRS](img.read_file(git, tree_hex, img.WORLD_ATTRS) or b"")
    return img.subtree(git, tree_hex, img.WORLD_FS), attrs


def validate_image(git, tree_hex: str) -> World:
    """The validated world of the image whose root tree is ``tree_hex``."""
    return validate_world(git, *_image_world(git, tree_hex))


def check_image(git, tree_hex: str, persistent: bool = True, likes: tuple[str, ...] = ()) -> None:
    """``validate_image``'s checks, as ``check_world`` does them (for merges); ``likes``: images
    whose worlds were found sound, whose trees stand in as counterparts."""
    check_world(git, *_image_world(git, tree_hex), persistent=persistent,
                likes=tuple(img.subtree(git, t, img.WORLD_FS) for t in likes))


def world_problems(git, tree_hex: str) -> list[str]:
    """What ``validate_image`` refuses in an image, as report lines (for ``git pf fsck``)."""
    try:
        check_image(git, tree_hex, persistent=False)  # fsck trusts no mark: it reads every tree
    except DataError as e:
        return [e.message]
    return []


class SafeDir:
    """Writes under ``root`` (a directory the caller made) without following any symlink.

    Every path is resolved component by component from an open directory
    descriptor (``O_NOFOLLOW``), new files are created with ``O_EXCL``, and
    modes and xattrs are set through descriptors. Directory descriptors are
    cached (at most ``MAX_DIR_FDS``); safe to share between threads."""

    def __init__(self, root: bytes | str):
        self.root = os.open(root, _DIR_FLAGS)
        self.umask = os.umask(0)
        os.umask(self.umask)
        self._fds: OrderedDict[bytes, int] = OrderedDict()
        self._lock = threading.Lock()

    def __enter__(self) -> "SafeDir":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            for fd in self._fds.values():
                os.close(fd)
            self._fds.clear()
            if self.root >= 0:
                os.close(self.root)
                self.root = -1

    def _dir(self, rel: bytes) -> int:
        """An open descriptor of directory ``rel``, made (with its parents) if missing. Lock held."""
        if not rel:
            return self.root
        fd = self._fds.get(rel)
        if fd is not None:
            self._fds.move_to_end(rel)
            return fd
        parent, _, name = rel.rpartition(b"/")
        pfd = self._dir(parent)
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=pfd)
        except FileNotFoundError:
            try:
                os.mkdir(name, 0o777, dir_fd=pfd)
            except FileExistsError:
                pass
            fd = self._open_dir(name, pfd, rel)
        except OSError as e:
            raise self._in_the_way(e, rel)
        self._fds[rel] = fd
        while len(self._fds) > MAX_DIR_FDS:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def _open_dir(self, name: bytes, pfd: int, rel: bytes) -> int:
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=pfd)
        except OSError as e:
            raise self._in_the_way(e, rel)

    @staticmethod
    def _in_the_way(e: OSError, rel: bytes) -> Exception:
        if e.errno in (errno.ELOOP, errno.ENOTDIR, errno.EEXIST):
            return DataError(f"'{show(rel)}' is not a directory (a symlink or file is in the way)")
        return e

    def _leaf(self, rel: bytes) -> tuple[int, bytes]:
        parent, _, name = rel.rpartition(b"/")
        if problem := name_problem(name):
            raise DataError(f"unsafe path '{show(rel)}' ({problem})")
        return self._dir(parent), name

    def mkdirs(self, rel: bytes) -> None:
        with self._lock:
            self._dir(rel)

    def create(self, rel: bytes) -> int:
        """A new file at ``rel`` opened for writing (mode 0600 until ``fchmod``); never an existing one."""
        with self._lock:
            pfd, name = self._leaf(rel)
            try:
                return os.open(name, _NEW_FILE_FLAGS, 0o600, dir_fd=pfd)
            except FileExistsError:
                raise DataError(f"'{show(rel)}' is written twice") from None

    def write_bytes(self, rel: bytes, data: bytes) -> None:
        fd = self.create(rel)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            os.fchmod(f.fileno(), 0o666 & ~self.umask)

    def symlink(self, rel: bytes, target: bytes) -> None:
        with self._lock:
            pfd, name = self._leaf(rel)
            try:
                os.symlink(target, name, dir_fd=pfd)
            except FileExistsError:
                raise DataError(f"'{show(rel)}' is written twice") from None

    def set_dir_attrs(self, rel: bytes, mode: int | None = None, xattrs: dict[str, bytes] | None = None) -> None:
        with self._lock:
            fd = self._dir(rel)
            for name, value in (xattrs or {}).items():
                os.setxattr(fd, name, value)
            if mode is not None:
                os.fchmod(fd, mode)


def resolve_fs_root(fs_root: Path, git_dir: Path) -> bytes:
    """The real absolute path of the sandbox, refusing ones that cannot be captured."""
    try:
        real = os.path.realpath(fs_root, strict=True)
    except FileNotFoundError:
        raise UsageError(f"'{fs_root}' does not exist", param="fs_root") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"'{fs_root}' is a symlink loop", param="fs_root") from None
        raise UsageError(f"cannot resolve '{fs_root}': {e.strerror}", param="fs_root") from None
    if not os.path.isdir(real):
        raise UsageError(f"'{fs_root}' is not a directory", param="fs_root")
    if not os.access(real, os.R_OK | os.X_OK):
        raise UsageError(f"'{fs_root}' is not readable", param="fs_root")
    git_real = os.path.realpath(git_dir)
    if real == git_real or real.startswith(git_real + os.sep):
        raise UsageError(f"'{fs_root}' is inside the git directory", param="fs_root")
    return os.fsencode(real)
