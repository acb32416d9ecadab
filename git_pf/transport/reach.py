"""Which side-store objects a set of images reaches.

An image reaches every object named by a pointer blob anywhere in its tree
(any layer: world, model, cache), and, for chunked content, the chunk-index
object and every chunk it lists. A layer that names side-store objects some
other way says which (``Layer.object_refs``: model tensors, cache pages; asked only of a
layer whose paths, ``Layer.claims``, the image's tree holds). Reads git objects and
the local side store (chunk indexes, fetched lazily when a transport is
attached); writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import pygit2

from ..store import pointer as pointer_fmt
from ..core.errors import DataError, PfError
from ..image.tree import MODE_LINK, MODE_TREE, lookup, read_tree
from ..layers import registry
from ..layers.base import Layer
from ..store.large import decode_chunk_index
from ..store.sidestore import SideStore



@dataclass(frozen=True)
class Need:
    """One pointer an image holds: where, and the objects it needs."""

    image: str
    path: str
    pointer: pointer_fmt.Pointer


@dataclass
class Reach:
    images: list[str] = field(default_factory=list)
    needs: dict[str, Need] = field(default_factory=dict)  # pointer oid -> first place it is needed
    extra: set[str] = field(default_factory=set)  # oids named by layers without pointers (Layer.object_refs)


def walk_images(git: pygit2.Repository, tips: Iterable[str], hide: Iterable[str] = ()) -> list[str]:
    """Commit ids reachable from ``tips`` and not from ``hide`` (ids missing locally are ignored)."""
    tips = [t for t in tips if t in git.odb] if tips else []
    if not tips:
        return []
    walker = git.walk(tips[0], pygit2.enums.SortMode.TOPOLOGICAL)
    for t in tips[1:]:
        walker.push(t)
    for h in hide:
        if h in git.odb:
            try:
                walker.hide(h)
            except (KeyError, pygit2.GitError):
                pass
    return [str(c.id) for c in walker]


def _pointers(git: pygit2.Repository, tree: bytes, prefix: str, seen: set[bytes]) -> Iterator[tuple[str, bytes]]:
    """``(path, pointer bytes)`` of every pointer blob under ``tree`` not in an already seen subtree."""
    if tree in seen:
        return
    seen.add(tree)
    for name, mode, oid in read_tree(git, tree):
        path = f"{prefix}{name.decode('utf-8', 'replace')}"
        if mode == MODE_TREE:
            yield from _pointers(git, oid, path + "/", seen)
        elif mode != MODE_LINK and oid not in seen:
            seen.add(oid)
            _, size = git.odb.read_header(pygit2.Oid(raw=oid))
            if size >= pointer_fmt.MAX_POINTER_SIZE:
                continue
            data = git[pygit2.Oid(raw=oid)].data
            if pointer_fmt.looks_like_pointer(data):
                yield path, data


def reach(git: pygit2.Repository, images: list[str]) -> Reach:
    """Every pointer the ``images`` hold (each once) plus objects layers name without pointers."""
    out = Reach(images=list(images))
    seen: set[bytes] = set()
    # side-store objects named without pointers, asked of a layer only when the tree holds one of
    # its paths (a push of a world alone imports no model or cache code)
    naming = [layer for layer in registry.layers() if type(layer).object_refs is not Layer.object_refs]
    for image in images:
        tree = git[image].peel(pygit2.Tree)
        for path, data in _pointers(git, tree.id.raw, "", seen):
            try:
                ptr = pointer_fmt.decode(data)
            except ValueError:
                continue
            out.needs.setdefault(ptr.oid, Need(image, path, ptr))
        for layer in naming:
            if not layer.claims or any(lookup(git, tree.id.raw, p) is not None for p in layer.claims):
                out.extra.update(layer.object_refs(git, str(tree.id)))
    return out


def objects_of(store: SideStore, reached: Reach, unknown: list[str] | None = None) -> dict[str, Need | None]:
    """Every side-store oid ``reached`` needs -> the pointer needing it (chunks expanded).

    Chunk indexes are fetched when missing; with ``unknown`` given, one that
    cannot be had is appended there instead of failing."""
    # sorted: a set's order changes from process to process, and the lfs adapter's bundles
    # must be cut the same way when a killed push is run again
    out: dict[str, Need | None] = {oid: None for oid in sorted(reached.extra)}
    indexes = [n for n in reached.needs.values() if n.pointer.chunks is not None]
    for need in reached.needs.values():
        out[need.pointer.object_ids()[0]] = need
    try:
        store.ensure(n.pointer.chunks for n in indexes)
    except PfError:
        lacking = next((n for n in indexes if not store.has(n.pointer.chunks)), None)
        if unknown is None and lacking is not None:
            raise DataError(f"image {lacking.image[:12]} path '{lacking.path}' needs side-store object "
                            f"{lacking.pointer.chunks}, which is not local and no remote has it") from None
        if unknown is None:
            raise
    for need in indexes:
        if unknown is not None and not store.has(need.pointer.chunks):
            unknown.append(need.pointer.chunks)
            continue
        try:
            chunks = decode_chunk_index(store.get(need.pointer.chunks))
        except (PfError, ValueError) as e:
            raise PfError(f"image {need.image[:12]} path '{need.path}': chunk index {need.pointer.chunks}: {e}",
                          3) from None
        for c in chunks:
            out.setdefault(c.oid, need)
    return out
