"""The model layer's snapshot input: ``--adapter DIR``, ``--base-model SPEC``, ``--delta FILE``.

``ModelInput.prepare`` validates what the user named before anything is
captured (one clear line per mistake); ``write`` stores the tensors in the
side store and sets the model parts it was given on the new image tree,
keeping the parent's other parts. Never imports torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import UsageError
from . import store as store_mod
from .identity import BaseModel
from .state import Adapter, read_state

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"


def _read_config(directory: Path) -> bytes:
    path = directory / CONFIG_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"'{directory}' has no {CONFIG_FILE} (not a peft adapter directory)", param="adapter") from None
    except OSError as e:
        raise UsageError(f"cannot read '{path}': {e.strerror}", param="adapter") from None
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        raise UsageError(f"'{path}' is not valid JSON ({e})", param="adapter") from None
    if not isinstance(doc, dict):
        raise UsageError(f"'{path}' is not a JSON object", param="adapter")
    return data


def check_adapter_dir(directory: Path) -> bytes:
    """Validate a peft adapter directory; returns its config bytes."""
    if not directory.is_dir():
        what = "does not exist" if not directory.exists() else "is not a directory"
        raise UsageError(f"'{directory}' {what}", param="adapter")
    config = _read_config(directory)
    weights = directory / WEIGHTS_FILE
    if not weights.exists():
        hint = " (adapter_model.bin is not supported: save with safe_serialization=True)" \
            if (directory / "adapter_model.bin").exists() else ""
        raise UsageError(f"'{directory}' has no {WEIGHTS_FILE}{hint}", param="adapter")
    store_mod.read_header(weights, "--adapter")
    return config


@dataclass(frozen=True)
class ModelInput:
    """A ``LayerInput`` for ``git_pf.ops.snapshot``: the model parts given on this snapshot."""

    adapter_dir: Path | None = None
    base: BaseModel | None = None
    delta_file: Path | None = None
    name: str = "model"

    @classmethod
    def prepare(cls, adapter: os.PathLike | str | None = None, base_model: str | BaseModel | None = None,
                delta: os.PathLike | str | None = None) -> "ModelInput":
        """Validate the inputs (UsageError on the first mistake); nothing is stored yet."""
        adapter_dir = Path(adapter) if adapter is not None else None
        delta_file = Path(delta) if delta is not None else None
        base = BaseModel.parse(base_model) if isinstance(base_model, str) else base_model
        if adapter_dir is not None:
            check_adapter_dir(adapter_dir)
        if delta_file is not None:
            if delta_file.is_dir():
                raise UsageError(f"'{delta_file}' is a directory, not a safetensors file", param="delta")
            store_mod.read_header(delta_file, "--delta")
        return cls(adapter_dir, base, delta_file)

    def write(self, repo, edit, parent) -> dict | None:
        state = read_state(repo.git, parent.tree if parent else None)
        adapter = None
        if self.adapter_dir is not None:
            config = check_adapter_dir(self.adapter_dir)
            index = store_mod.capture_file(repo.store, self.adapter_dir / WEIGHTS_FILE, "--adapter")
            adapter = Adapter(config, index)
        delta = store_mod.capture_file(repo.store, self.delta_file, "--delta") if self.delta_file else None
        state = state.with_parts(base=self.base, adapter=adapter, delta=delta)
        edit.changes.update(state.changes(edit.writer))
        return state.summary()
