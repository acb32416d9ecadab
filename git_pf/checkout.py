"""Checkout: write chosen layers of an image into a directory, all or nothing.

The result is built in a temporary sibling directory and moved into place
only when complete, so a failure (a corrupt or missing object) leaves the
destination as it was; every name and path is checked first
(``safepath``), and a world holding ``.pf`` is refused when other layers
go there. A temporary directory left by a killed checkout is removed by the
next checkout into the same target (``siblings``). The world goes to the directory itself; other
layers go under ``.pf/`` when the world is included, else straight into the
directory, with their paths as in the image tree (docs/format.md). A layer
with its own writer (``EXTRA_LAYERS``: model, cache) writes into the
directory itself when it is the only layer asked for, else into
``<side>/<layer>/``.
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from . import image as img, layercheck, refs, safepath, siblings, verify
from .layers import registry
from .layers.trace import tape
from .errors import DataError, UsageError
from .gittree import MODE_TREE, lookup, read_blob
from .layers.world.restore import RestoreStats, restore

# From the registry (git_pf.layers.registry): the layers whose files are written as they are
# (a tree there: the tape, entry by entry) ...
LAYER_FILES = {layer.name: list(layer.files) for layer in registry.layers() if layer.files}
# ... and the layers with a writer of their own, imported only when asked for (so the core never
# imports torch): name -> "module:function", function(repo, image, dest: Path) -> None writing the
# layer's files into ``dest`` (created, empty).
EXTRA_LAYERS: dict[str, str] = {layer.name: layer.writer for layer in registry.layers() if layer.writer}
LAYERS = ("world",) + tuple(LAYER_FILES) + tuple(EXTRA_LAYERS)
SIDECAR = ".pf"


@dataclass(frozen=True)
class CheckoutResult:
    image: img.ImageInfo
    path: Path
    layers: tuple[str, ...]
    stats: RestoreStats  # the world's files
    layer_files: tuple[str, ...] = ()  # files the other layers wrote, relative to ``path``

    def to_json(self) -> dict:
        return {"id": self.image.id, "path": str(self.path), "layers": list(self.layers),
                "files": self.stats.files, "bytes": self.stats.bytes, "pointers": self.stats.pointers,
                "layer_files": list(self.layer_files)}


def parse_layers(spec: str | tuple[str, ...] | list[str]) -> tuple[str, ...]:
    names = [s.strip() for s in (spec.split(",") if isinstance(spec, str) else spec) if s.strip()]
    unknown = [n for n in names if n not in LAYERS]
    if unknown or not names:
        raise UsageError(f"unknown layer '{unknown[0] if unknown else ''}' (choose from {','.join(LAYERS)})", param="layers")
    return tuple(dict.fromkeys(names))


def _prepare_dest(dest: Path, force: bool) -> bool:
    """Check the destination; True when it exists and must be replaced."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"'{dest}' exists and is not a directory", param="into")
    if not dest.exists():
        above = dest.parent
        while not above.exists() and not above.is_symlink():  # missing parents are made (checkout)
            above = above.parent
        if not above.is_dir():
            raise UsageError(f"'{above}' is not a directory, so '{dest}' cannot be made", param="into")
        return False
    if any(os.scandir(dest)) and not force:
        raise UsageError(f"'{dest}' is not empty (use --force to replace its contents)", param="into")
    return True


def checkout(repo, rev: str, into: Path, layers=("world",), force: bool = False) -> CheckoutResult:
    git = repo.git
    image = img.read_image(git, refs.resolve(git, rev))
    verify.check_use(git, image.id, rev)
    layers = parse_layers(layers)
    dest = Path(os.path.abspath(into))
    replace = _prepare_dest(dest, force)
    _check_layer_data(git, image, layers)
    with _naming(image):  # every path is checked before anything is written
        world = safepath.validate_image(git, image.tree) if "world" in layers else None
        files = _layer_files(git, image.tree, layers)
        if world is not None and len(layers) > 1 and SIDECAR.encode() in world.kinds:
            raise DataError(f"world/fs: '{SIDECAR}' is where checkout writes the other layers")
    dest.parent.mkdir(parents=True, exist_ok=True)
    siblings.remove_leftovers(dest, repo.git_dir)
    tmp = siblings.make(dest, "checkout", repo.git_dir)
    try:
        with _naming(image):  # the object may be missing on a remote
            stats, written = _fill(repo, image, layers, tmp, world, files)
        _swap_into_place(tmp, dest, replace, repo.git_dir)
    finally:
        siblings.drop(tmp, repo.git_dir)
    return CheckoutResult(image, dest, layers, stats, written)


def _fill(repo, image: img.ImageInfo, layers: tuple[str, ...], tmp: Path, world, files) -> tuple[RestoreStats, tuple[str, ...]]:
    """Write the layers into ``tmp``: the world's stats, and the paths the other layers wrote."""
    git = repo.git
    stats = RestoreStats()
    written: list[bytes] = []
    if world is not None:
        stats = restore(git, repo.store, world, os.fsencode(tmp))
    side = SIDECAR.encode() if world is not None else b""
    with safepath.SafeDir(os.fsencode(tmp)) as out:
        for layer in layers:
            if layer in EXTRA_LAYERS:
                target = os.path.join(side, layer.encode()) if len(layers) > 1 else b""
                out.mkdirs(target)
                registry.load(EXTRA_LAYERS[layer])(repo, image, tmp / os.fsdecode(target))
                for base, _, names in os.walk(os.path.join(os.fsencode(tmp), target)):
                    written += [os.path.relpath(os.path.join(base, n), os.fsencode(tmp)) for n in names]
        for name, blob in files:
            out.write_bytes(os.path.join(side, name), read_blob(git, blob))
            written.append(os.path.join(side, name))
    return stats, tuple(sorted(os.fsdecode(p) for p in written))


def _check_layer_data(git, image: img.ImageInfo, layers: tuple[str, ...]) -> None:
    """Parse every layer file the plain layers write, with the one reader of each (``layercheck``,
    the tape's own), before anything is written: a malformed one is a DataError naming the image."""
    for layer in layers:
        for path in LAYER_FILES.get(layer, []):
            if path in layercheck.PARSERS:
                layercheck.load(git, image, path)
    if "trace" in layers:
        with _naming(image):
            tape.read(git, image.tree)


@contextmanager
def _naming(image: img.ImageInfo):
    """A DataError raised inside names ``image``."""
    try:
        yield
    except DataError as e:
        raise DataError(f"image {image.short}: {e.message}", e.code) from None


def _layer_files(git, tree: str, layers: tuple[str, ...]) -> list[tuple[bytes, bytes]]:
    """(path, raw blob oid) of every file the plain layers write: each layer file (a tree there is
    absent, as its reader has it) and each tape entry (``tape.entries``, which checks their names)."""
    out = []
    for layer in layers:
        for path in LAYER_FILES.get(layer, []):
            if path == tape.PATH:
                out += [(path + b"/" + name, oid) for name, oid in sorted(tape.entries(git, tree).items())]
                continue
            found = lookup(git, bytes.fromhex(tree), path)
            if found is not None and found[0] != MODE_TREE:
                out.append((path, found[1]))
    return out


def _swap_into_place(tmp: Path, dest: Path, replace: bool, git_dir: Path) -> None:
    if not replace:
        os.rename(tmp, dest)
        return
    try:
        os.rename(tmp, dest)  # succeeds when dest is an empty directory
        return
    except OSError:
        pass
    old = siblings.make(dest, "old", git_dir)
    os.rename(dest, old / "d")
    os.rename(tmp, dest)
    siblings.drop(old, git_dir)
