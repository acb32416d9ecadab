"""Write an image's world (``world/fs`` + ``fs.attrs``) into a directory, exactly.

Regular files with their exec bit and recorded permissions, symlinks as
links, empty directories, ``user.*`` xattrs, and large files reassembled from
the side store (fetched in one batch first when a transport is attached,
verified on read). The world must have passed ``safepath.validate_world``;
every write goes through a ``safepath.SafeDir``, so nothing is written through
a symlink. The caller owns the destination directory's lifecycle (atomic
placement); this module only fills it.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pygit2

from ...core import writeback
from ...store import pointer as pointer_fmt
from ...core.errors import DataError
from ...image.tree import MODE_EXEC, MODE_LINK, MODE_TREE, blob_size, iter_blob, read_blob, read_pointer, read_tree
from ...image.safepath import DIR, SafeDir, World
from ...store.sidestore import SideStore
from .attrs import DEFAULT_EXEC_MODE, DEFAULT_FILE_MODE, PathAttrs
from .names import from_tree

_WRITEBACK_STEP = 8 * 1024 * 1024
_FILE_WRITERS = 2  # large (side-store) files written at once
LINK_MAX = 4096  # PATH_MAX: no symlink target is longer


@dataclass
class RestoreStats:
    files: int = 0
    bytes: int = 0
    pointers: int = 0


def iter_world(repo: pygit2.Repository, tree_raw: bytes, rel_dir: bytes = b""):
    """Yield ``(rel path, mode, raw blob oid)`` for every non-tree entry, depth first,
    with tree-name escaping undone."""
    for name, mode, oid in read_tree(repo, tree_raw):
        rel = rel_dir + b"/" + from_tree(name) if rel_dir else from_tree(name)
        if mode == MODE_TREE:
            yield from iter_world(repo, oid, rel)
        else:
            yield rel, mode, oid


def restore(repo: pygit2.Repository, store: SideStore, world: World, dest: bytes) -> RestoreStats:
    """Write ``world`` (from ``safepath.validate_world``) into the directory ``dest``."""
    stats = RestoreStats()
    attrs = world.attrs
    pending: list[tuple[bytes, int, pointer_fmt.Pointer]] = []
    with SafeDir(dest) as out:
        for rel, mode, oid in world.entries:
            if mode == MODE_LINK:
                with _naming(rel):
                    out.symlink(rel, read_blob(repo, oid, LINK_MAX, "the longest symlink target"))
                continue
            entry = attrs.get(rel)
            if entry is not None and entry.pointer:
                try:
                    pending.append((rel, mode, read_pointer(repo, oid)))
                except ValueError as e:
                    raise DataError(f"'{os.fsdecode(rel)}': damaged pointer ({e})") from None
                continue
            with _naming(rel):
                size = blob_size(repo, oid)
                _write_file(out, rel, iter_blob(repo, oid, size), mode, entry)  # a large blob streamed
            stats.files += 1
            stats.bytes += size
        _restore_pointers(store, out, pending, attrs, stats)
        _apply_attrs(out, world)
    return stats


@contextmanager
def _naming(rel: bytes):
    """A DataError raised inside names the world path ``rel``."""
    try:
        yield
    except DataError as e:
        raise DataError(f"'{os.fsdecode(rel)}': {e.message}", e.code) from None


def _restore_pointers(store, out: SafeDir, pending, attrs, stats) -> None:
    try:
        store.ensure(oid for _, _, p in pending for oid in p.object_ids())
    except DataError as e:
        lacking = [(rel, o) for rel, _, p in pending for o in p.object_ids() if not store.has(o)]
        if not lacking or "corrupt" in str(e):
            raise DataError(f"cannot restore '{os.fsdecode(pending[0][0]) if pending else '?'}' and others: {e}") from None
        rel, oid = lacking[0]
        why = getattr(store, "fetch_problem", None)
        raise DataError(f"cannot restore '{os.fsdecode(rel)}': side-store object {oid} is missing "
                        f"(not local, and {f'fetching it failed: {why}' if why else 'no remote has it'})",
                        e.code) from None

    def write(item) -> None:
        rel, mode, ptr = item
        try:
            _write_file(out, rel, store.iter_large(ptr.oid, ptr.size, ptr.chunks), mode, attrs.get(rel))
        except DataError as e:
            raise DataError(f"cannot restore '{os.fsdecode(rel)}' (oid {ptr.oid}): {e}") from None

    # Two large files are written at once: on a virtual machine, taking fresh page-cache
    # pages is most of a large write's CPU time, and two writers share it between cores.
    with ThreadPoolExecutor(_FILE_WRITERS) as pool:
        for _ in pool.map(write, pending):
            pass
    stats.files += len(pending)
    stats.pointers += len(pending)
    stats.bytes += sum(ptr.size for _, _, ptr in pending)


def _write_file(out: SafeDir, rel: bytes, parts, mode: int, entry: PathAttrs | None) -> None:
    with os.fdopen(out.create(rel), "wb") as f:
        written = started = 0
        for part in parts:
            f.write(part)
            written += len(part)
            if written - started >= _WRITEBACK_STEP:  # a large file: let the disk start on it now, so
                f.flush()  # the writer is not throttled later by a pile of dirty pages
                writeback.start(f.fileno(), started, written - started)
                started = written
        f.flush()
        perm = DEFAULT_EXEC_MODE if mode == MODE_EXEC else DEFAULT_FILE_MODE
        if entry is not None:
            if entry.xattrs:  # before the mode, which may take away the right to set them
                for name, value in entry.xattrs.items():
                    os.setxattr(f.fileno(), name, value)
            if entry.mode is not None:
                perm = entry.mode
        os.fchmod(f.fileno(), perm)


def _apply_attrs(out: SafeDir, world: World) -> None:
    """Create recorded directories, set their xattrs, then directory modes deepest first
    (file xattrs and modes are set as each file is written)."""
    dirs = [(rel, e) for rel, e in world.attrs.items() if e.is_dir or world.kinds.get(rel) == DIR]
    for rel, entry in dirs:
        out.set_dir_attrs(rel, xattrs=entry.xattrs)
    for rel, entry in sorted(dirs, key=lambda d: len(d[0]), reverse=True):
        if entry.mode is not None:
            out.set_dir_attrs(rel, mode=entry.mode)
