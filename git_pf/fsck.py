"""Checking a repository's images and side store.

Every ref under ``refs/pf/`` must name a valid image; every image reachable
from them must have layer files that parse (manifest, attrs, env, process
table, trace, ledger: ``layercheck``), a sound effects
chain that extends its first parent's (docs/format.md §9), and pointers
whose side-store objects exist; every local side-store
object must hash to its name. Reports problems; repairs nothing.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field

import pygit2

from . import image as img, layercheck, refs, safepath
from .layers import registry
from .layers.effects import ledger as effects_mod
from .store import pointer as pointer_fmt
from .errors import PfError
from .gittree import lookup, read_blob
from .store.sidestore import SideStore
from .layers.world import attrs as attrs_mod
from .layers.world.names import tree_path


@dataclass
class FsckReport:
    images: int = 0
    objects: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_json(self) -> dict:
        return {"ok": self.ok, "images": self.images, "objects": self.objects, "problems": self.problems}


def _image_refs(git: pygit2.Repository) -> dict[str, str]:

    return {name: oid for name, oid in refs.list_refs(git, refs.ROOT).items() if not refs.is_index_ref(name)}


def _check_pointers(git, store: SideStore, image: img.ImageInfo, report: FsckReport, seen: set[str],
                    remote_has=lambda oid: False) -> None:
    world = img.subtree(git, image.tree, img.WORLD_FS)
    attrs = attrs_mod.decode(img.read_file(git, image.tree, img.WORLD_ATTRS) or b"")
    for rel, entry in attrs.items():
        if not entry.pointer or world is None:
            continue
        found = lookup(git, bytes.fromhex(world), tree_path(rel))
        where = f"image {image.short} path '{os.fsdecode(rel)}'"
        if found is None:
            report.problems.append(f"{where}: attrs name a pointer that is not in the tree")
            continue
        try:
            ptr = pointer_fmt.decode(read_blob(git, found[1]))
        except ValueError as e:
            report.problems.append(f"{where}: damaged pointer ({e})")
            continue
        key = f"{ptr.oid} {ptr.size} {ptr.chunks}"  # the same oid with another size is checked again
        if key in seen:
            continue
        seen.add(key)
        needed = [ptr.oid] if ptr.chunks is None else [ptr.chunks]
        chunks = ()
        if ptr.chunks is None or store.has(ptr.chunks):
            try:  # the index's chunk sizes must add up to the pointer's size
                chunks = store.chunks_of(ptr.oid, ptr.size, ptr.chunks)
            except PfError as e:
                report.problems.append(f"{where}: {e}")
        needed += [c.oid for c in chunks if c.oid not in needed]
        for oid in needed:
            if not store.has(oid) and not remote_has(oid):  # listed by a remote's index: fetched lazily
                report.problems.append(f"{where}: side-store object {oid} is missing")
        for c in chunks:  # each object decodes to the size it is listed with: its frame header says so
            if store.has(c.oid):
                try:
                    store.check_size(c.oid, c.size)
                except PfError as e:
                    report.problems.append(f"{where}: {e}")


def _check_layer_objects(git, store: SideStore, image: img.ImageInfo, report: FsckReport, seen: set[str],
                         remote_has=lambda oid: False) -> None:
    """Side-store objects a layer names without pointer blobs (model tensors), as registered
    in the registry (``git_pf.layers.registry``), must exist."""
    for layer in (layer for layer in registry.layers() if layer.object_refs):
        for oid in registry.load(layer.object_refs)(git, image.tree):
            if oid not in seen:
                seen.add(oid)
                if not store.has(oid) and not remote_has(oid):
                    report.problems.append(f"image {image.short} layer {layer.name}: side-store object {oid} is missing")


def _check_effects_history(git, image: img.ImageInfo, ledger: list[dict], report: FsckReport) -> None:
    """The ledger extends its first parent's (unless the image carries ``Pf-Rewrite-Effects``)
    and records no irreversible effect twice; a repeat is reported where it first appears."""
    try:
        parent = img.read_image(git, image.parents[0]) if image.parents else None
        base = effects_mod.decode(img.read_file(git, parent.tree, img.EFFECTS_LEDGER) or b"") if parent else []
    except PfError:
        parent, base = None, []  # the parent's own check reports it
    inherited = {(k, a) for k, _, a in effects_mod.repeated_irreversible(base)}
    for key, first, again in effects_mod.repeated_irreversible(ledger):
        if (key, again) not in inherited:
            report.problems.append(f"image {image.short}: effects: irreversible effect {key} recorded twice "
                                   f"(entries {first} and {again})")
    problem = effects_mod.extension_problem(base, ledger) if parent else None
    if problem and not image.trailer(effects_mod.REWRITE_TRAILER):
        report.problems.append(f"image {image.short}: effects ledger does not extend its first parent "
                               f"{parent.short}'s: {problem} (and no {effects_mod.REWRITE_TRAILER} trailer)")


def _check_image(git, store, image: img.ImageInfo, report: FsckReport, seen: set[str], remote_has=lambda o: False) -> None:
    bad = layercheck.problems(git, image.tree)  # each layer file that does not parse: one line
    report.problems += [f"image {image.short}: {line}" for line in bad.values()]
    try:
        if img.EFFECTS_LEDGER not in bad:
            ledger = effects_mod.decode(img.read_file(git, image.tree, img.EFFECTS_LEDGER) or b"")
            for problem in effects_mod.verify(ledger):
                report.problems.append(f"image {image.short}: effects {problem}")
            _check_effects_history(git, image, ledger, report)
        if img.WORLD_ATTRS not in bad:
            report.problems += [f"image {image.short}: {p}" for p in safepath.world_problems(git, image.tree)]
            _check_pointers(git, store, image, report, seen, remote_has)
        _check_layer_objects(git, store, image, report, seen, remote_has)
    except PfError as e:
        report.problems.append(f"image {image.short}: {e}")


def fsck(git: pygit2.Repository, store: SideStore) -> FsckReport:
    from .transport.fsckext import check_indexes

    report = FsckReport()
    index_problems, remote_has = check_indexes(git)
    report.problems += index_problems
    starts = []
    for name, oid in _image_refs(git).items():
        try:
            img.read_image(git, oid)
            starts.append(oid)
        except (PfError, KeyError, ValueError) as e:
            report.problems.append(f"ref refs/pf/{name}: {e}")
    seen_ptrs: set[str] = set()
    if starts:
        walker = git.walk(starts[0])
        for oid in starts[1:]:
            walker.push(oid)
        for commit in walker:
            report.images += 1
            try:
                image = img.read_image(git, str(commit.id))
            except PfError as e:
                report.problems.append(str(e))  # names the image
                continue
            _check_image(git, store, image, report, seen_ptrs, remote_has)
    for oid in store.iter_oids():
        report.objects += 1
        try:
            store.get(oid, rehash=True)  # the name itself, not only the frame
        except PfError as e:
            report.problems.append(str(e))
    return report
