"""Checking a repository's images and side store.

Every ref under ``refs/pf/`` must name a valid image; every image reachable
from them must have layer files that parse (manifest, attrs, env, process
table, trace, ledger: ``layercheck``) and pass each layer's own checks once
its files parse (``Layer.fsck``: the world's names and pointers, the effects
chain that extends its first parent's, docs/format.md §9), and the side-store
objects a layer names without pointers (``Layer.object_refs``) must exist;
every local side-store object must hash to its name. Reports problems;
repairs nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import pygit2

from ..image import manifest as img, layercheck, refs
from ..core.errors import PfError
from ..layers import registry
from ..store.sidestore import SideStore


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

    return {name: oid for name, oid in refs.list_refs(git, refs.ROOT).items() if refs.is_image_ref(name)}


def _check_layer_objects(git, store: SideStore, image: img.ImageInfo, report: FsckReport, seen: set[str],
                         remote_has=lambda oid: False) -> None:
    """Side-store objects a layer names without pointer blobs (``Layer.object_refs``: model
    tensors, cache pages) must exist."""
    for layer in registry.layers():
        for oid in layer.object_refs(git, image.tree):
            if oid not in seen:
                seen.add(oid)
                if not store.has(oid) and not remote_has(oid):
                    report.problems.append(f"image {image.short} layer {layer.name}: side-store object {oid} is missing")


def _check_image(git, store, image: img.ImageInfo, report: FsckReport, seen: set[str], remote_has=lambda o: False) -> None:
    bad = layercheck.problems(git, image.tree)  # each layer file that does not parse: one line
    report.problems += [f"image {image.short}: {line}" for line in bad.values()]
    try:
        for layer in registry.layers():  # each layer's own checks, once its files parse
            if not any(path in bad for path in layer.parsers):
                layer.fsck(git, store, image, report.problems, seen, remote_has)
        _check_layer_objects(git, store, image, report, seen, remote_has)
    except PfError as e:
        report.problems.append(f"image {image.short}: {e}")


def fsck(git: pygit2.Repository, store: SideStore) -> FsckReport:
    from ..transport.fsckext import check_indexes

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
