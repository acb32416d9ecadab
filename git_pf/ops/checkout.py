"""Checkout: write chosen layers of an image into a directory, all or nothing.

The result is built in a temporary sibling directory and moved into place
only when complete, so a failure (a corrupt or missing object) leaves the
destination as it was; every layer checks what it will write first
(``Layer.checkout_plan``: names and paths by ``safepath``, each layer file by its
reader), and a root layer holding ``.pf`` is refused when other layers go there. A
temporary directory left by a killed checkout is removed by the next checkout into the
same target (``siblings``). The root layer (the world) goes to the directory itself;
other layers go under ``.pf/`` when it is included, else straight into the directory,
with their paths as in the image tree (docs/format.md). A layer with its own writer
(model, cache) writes into the directory itself when it is the only layer asked for,
else into ``<side>/<layer>/``. Every layer is reached through the registry
(``git_pf.layers.registry``); none is named here.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..image import manifest as img, refs, safepath, verify
from ..core import siblings
from ..core.errors import DataError, UsageError
from ..layers import registry

LAYERS = tuple(layer.name for layer in sorted(registry.layers(), key=lambda layer: not layer.root))
SIDECAR = ".pf"


@dataclass(frozen=True)
class CheckoutResult:
    image: img.ImageInfo
    path: Path
    layers: tuple[str, ...]
    stats: Any  # the root layer's files: files, bytes, pointers (the world's)
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


def check_dest(dest: Path, param: str, force: bool | None = False) -> bool:
    """Check a directory a command writes into; True when it exists and must be replaced.
    It must be a directory or absent; one not empty is refused unless ``force``. Missing
    parents are made later, unless ``force`` is None (``merge --checkout``): then the parent
    must exist and a directory is never replaced."""
    if dest.is_symlink() or (dest.exists() and not dest.is_dir()):
        raise UsageError(f"'{dest}' exists and is not a directory", param=param)
    if dest.exists():
        if any(os.scandir(dest)) and not force:
            hint = "" if force is None else " (use --force to replace its contents)"
            raise UsageError(f"'{dest}' is not empty{hint}", param=param)
        return True
    if force is None:
        if not dest.parent.is_dir():
            raise UsageError(f"parent directory of '{dest}' does not exist", param=param)
        return False
    above = dest.parent
    while not above.exists() and not above.is_symlink():  # missing parents are made (checkout)
        above = above.parent
    if not above.is_dir():
        raise UsageError(f"'{above}' is not a directory, so '{dest}' cannot be made", param=param)
    return False


def checkout(repo, rev: str, into: Path, layers=(registry.root().name,), force: bool = False) -> CheckoutResult:
    git = repo.git
    image = img.read_image(git, refs.resolve(git, rev))
    verify.check_use(git, image.id, rev)
    layers = parse_layers(layers)
    dest = Path(os.path.abspath(into))
    replace = check_dest(dest, "into", force)
    chosen = [registry.get(name) for name in layers]
    # every layer checks what it will write before anything is written: the root layer last
    plans = {layer.name: layer.checkout_plan(git, image) for layer in sorted(chosen, key=lambda x: x.root)}
    root = next((layer for layer in chosen if layer.root), None)
    if root is not None and len(layers) > 1 and root.holds(plans[root.name], SIDECAR.encode()):
        raise DataError(f"image {image.short}: {os.fsdecode(root.claims[0])}: "
                        f"'{SIDECAR}' is where checkout writes the other layers")
    dest.parent.mkdir(parents=True, exist_ok=True)
    siblings.remove_leftovers(dest, repo.git_dir)
    tmp = siblings.make(dest, "checkout", repo.git_dir)
    try:
        stats, written = _fill(repo, image, chosen, plans, tmp, root is not None)
        _swap_into_place(tmp, dest, replace, repo.git_dir)
    finally:
        siblings.drop(tmp, repo.git_dir)
    return CheckoutResult(image, dest, layers, stats if stats is not None else registry.root().empty_stats(), written)


def _fill(repo, image: img.ImageInfo, chosen: list, plans: dict, tmp: Path, rooted: bool) -> tuple[Any, tuple[str, ...]]:
    """Write the layers into ``tmp``: the root layer's stats (None without it), and the paths
    the other layers wrote."""
    stats, written = None, []
    side = SIDECAR.encode() if rooted else b""
    for layer in (x for x in chosen if x.root):  # the root layer writes the directory itself
        with registry.naming(image):  # an object may be missing on a remote
            stats, _ = layer.checkout(repo, image, plans[layer.name], tmp, None, side, len(chosen) == 1)
    with safepath.SafeDir(os.fsencode(tmp)) as out:
        for layer in (x for x in chosen if not x.root):
            with registry.naming(image):
                written += layer.checkout(repo, image, plans[layer.name], tmp, out, side, len(chosen) == 1)[1]
    return stats, tuple(sorted(os.fsdecode(p) for p in written))


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
