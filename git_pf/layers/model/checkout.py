"""Checkout writer of the model layer (``git pf checkout REV --layers model --into DIR``).

Writes the image's model parts as files a user loads directly:
``adapter_config.json`` + ``adapter_model.safetensors`` (so
``PeftModel.from_pretrained(base, DIR)`` works), ``base.json`` and
``delta.safetensors``. The layer's ``writer`` in the registry; the
caller owns the destination's lifecycle. Never imports torch.
"""
from __future__ import annotations

from pathlib import Path

from ...core.errors import DataError, UsageError
from . import store as store_mod
from .layer import CONFIG_FILE, WEIGHTS_FILE
from .state import read_state

BASE_FILE = "base.json"
DELTA_FILE = "delta.safetensors"


def write(repo, image, dest: Path) -> None:
    state = read_state(repo.git, image.tree)
    if state.empty:
        raise UsageError(f"image {image.short} has no model layer")
    try:
        if state.base is not None:
            (dest / BASE_FILE).write_bytes(state.base.encode())
        if state.adapter is not None:
            (dest / CONFIG_FILE).write_bytes(state.adapter.config)
            store_mod.write_file(repo.store, state.adapter.index, dest / WEIGHTS_FILE)
        if state.delta is not None:
            store_mod.write_file(repo.store, state.delta, dest / DELTA_FILE)
    except DataError as e:
        raise DataError(f"cannot restore the model layer of {image.short}: {e}") from None
