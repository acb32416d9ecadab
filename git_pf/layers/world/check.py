"""fsck's checks of an image's world (``Layer.fsck``): the tree's names and kinds
(``safepath.world_problems``) and its pointers, each of which must be in the tree, decode,
and name side-store objects that exist (or that a remote's index lists) with the sizes
they are listed with. Run once ``fs.attrs.jsonl`` parses. Reads; repairs nothing.
"""
from __future__ import annotations

import os

from ...image import manifest as img, safepath
from ...core.errors import PfError
from ...image.tree import lookup, read_pointer
from ...store import pointer as pointer_fmt
from . import attrs as attrs_mod
from .names import tree_path


def problems(git, store, image: img.ImageInfo, out: list[str], seen: set[str], remote_has) -> None:
    """Append one line per problem of ``image``'s world to ``out``; ``seen`` holds the pointers
    already checked (in other images)."""
    out += [f"image {image.short}: {p}" for p in safepath.world_problems(git, image.tree)]
    world = img.subtree(git, image.tree, img.WORLD_FS)
    attrs = attrs_mod.decode(img.read_file(git, image.tree, img.WORLD_ATTRS) or b"")
    for rel, entry in attrs.items():
        if not entry.pointer or world is None:
            continue
        found = lookup(git, bytes.fromhex(world), tree_path(rel))
        where = f"image {image.short} path '{os.fsdecode(rel)}'"
        if found is None:
            out.append(f"{where}: attrs name a pointer that is not in the tree")
            continue
        try:
            ptr = read_pointer(git, found[1])
        except ValueError as e:
            out.append(f"{where}: damaged pointer ({e})")
            continue
        key = f"{ptr.oid} {ptr.size} {ptr.chunks}"  # the same oid with another size is checked again
        if key not in seen:
            seen.add(key)
            _check_objects(store, ptr, where, out, remote_has)


def _check_objects(store, ptr: pointer_fmt.Pointer, where: str, out: list[str], remote_has) -> None:
    needed = [ptr.oid] if ptr.chunks is None else [ptr.chunks]
    chunks = ()
    if ptr.chunks is None or store.has(ptr.chunks):
        try:  # the index's chunk sizes must add up to the pointer's size
            chunks = store.chunks_of(ptr.oid, ptr.size, ptr.chunks)
        except PfError as e:
            out.append(f"{where}: {e}")
    needed += [c.oid for c in chunks if c.oid not in needed]
    for oid in needed:
        if not store.has(oid) and not remote_has(oid):  # listed by a remote's index: fetched lazily
            out.append(f"{where}: side-store object {oid} is missing")
    for c in chunks:  # each object decodes to the size it is listed with: its frame header says so
        if store.has(c.oid):
            try:
                store.check_size(c.oid, c.size)
            except PfError as e:
                out.append(f"{where}: {e}")
