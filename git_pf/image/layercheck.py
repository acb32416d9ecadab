"""Which reader parses which layer file of an image, and checking an image with them.

Image data is untrusted: every layer file git-pf reads from an image has one
parser here, and each raises ``DataError`` naming the path (and line) when
the file is malformed (types as docs/format.md specifies them). ``fsck``
reports every malformed file, ``show`` and ``diff`` refuse an image holding
one (``show`` and a fast-forward merge also one with a bad tape entry), and
the merge engine parses each layer file of a merge result before it
writes the image, so a merge never writes a layer it could not parse. Reads
blobs; writes nothing. A tree a layer registers (the recorded exchanges,
``trace/tape/``) is checked entry by entry with its checker by ``check``
(fsck reaches it through the layer's own check); the plug-in layers (model,
cache) have their own readers.
"""
from __future__ import annotations

import os
from typing import Callable

from . import manifest as img
from ..core.errors import DataError
from ..layers import registry

# The manifest's parser and every file parser a layer registers (git_pf.layers.registry).
PARSERS: dict[bytes, Callable[[bytes], object]] = {
    img.MANIFEST: img.parse_manifest,
    **{path: registry.load(spec) for layer in registry.layers() for path, spec in layer.parsers.items()},
}
# The trees a layer registers (``Layer.tree_checks``: the tape): (git, image tree) -> each bad
# entry, path -> one line.
TREES: dict[bytes, Callable[[object, str], dict[bytes, str]]] = {
    path: registry.load(spec) for layer in registry.layers() for path, spec in layer.tree_checks.items()}


def _parse(git, tree: str, path: bytes, default=None):
    data = img.read_file(git, tree, path)
    return default if data is None else PARSERS[path](data)


def load(git, image: img.ImageInfo, path: bytes, default=None):
    """The parsed layer file at ``path`` of ``image`` (``default`` when absent); a DataError
    names the image."""
    try:
        return _parse(git, image.tree, path, default)
    except DataError as e:
        raise DataError(f"image {image.short}: {e.message}", e.code) from None


def parses(git, path: bytes, found: tuple[int, bytes]) -> bool:
    """Whether the layer file ``path`` whose tree entry is ``found`` (mode, raw oid) parses."""
    try:
        PARSERS[path](img._layer_blob(git, found, path))  # within its limit, as read_file reads it
    except DataError:
        return False
    return True


def problems(git, tree: str, skip=frozenset()) -> dict[bytes, str]:
    """Each malformed layer file of an image tree: path -> one line (the path is named in it);
    the paths of ``skip`` are not read (the caller parsed the blob they hold). The registered
    trees are not read here: fsck reports their entries through the layer's own check
    (``Layer.fsck``)."""
    out = {}
    for path in PARSERS:
        if path in skip:
            continue
        try:
            _parse(git, tree, path)
        except DataError as e:
            out[path] = e.message if e.message.startswith(os.fsdecode(path)) else f"{os.fsdecode(path)}: {e.message}"
    return out


def check(git, image: img.ImageInfo, what: str | None = None) -> None:
    """Raise the first malformed layer file, or bad entry of a registered tree (the tape), of
    ``image`` as a DataError naming ``what`` (default: the image)."""
    found = problems(git, image.tree)
    for check_tree in TREES.values():
        found = found or check_tree(git, image.tree)
    if found:
        raise DataError(f"{what or f'image {image.short}'}: {next(iter(found.values()))}")
