"""Checkout writer of the KV layer (``git pf checkout --layers cache``).

Writes the interchange file ``kv.safetensors`` (per-layer K/V + token ids +
model and adapter) and the image's ``pages.json`` into the target directory,
every page verified against its recorded hash on the way. The layer's
``writer`` in the registry (``git_pf.layers.registry``); writes nothing else.
"""
from __future__ import annotations

from pathlib import Path

from ...image.manifest import read_file
from .kvfile import FILENAME, save
from .restoring import load_table, read_layers
from .table import PATH


def write_layer(repo, image, dest: Path) -> None:
    repo, table = load_table(image, repo)
    layers = read_layers(repo, table)
    save(dest / FILENAME, layers, list(table.tokens), model=table.model, adapter=table.adapter)
    (dest / "pages.json").write_bytes(read_file(repo.git, image.tree, PATH))
