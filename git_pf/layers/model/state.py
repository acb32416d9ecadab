"""The model layer as it sits in an image tree (docs/model.md), read and written.

    model/base.json                    identity of the base weights
    model/adapter/adapter_config.json  the peft config, bytes as given
    model/adapter/tensors.json         canonical index of adapter_model.safetensors
    model/delta/tensors.json           canonical index of a full-weight delta

``ModelState`` is those three parts; ``read_state`` loads them from a tree,
``changes`` turns them into tree edits, ``summary`` is the manifest entry and
``object_ids`` the side-store objects the layer needs (for gc / transport).
Never imports torch.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, replace

from ...image import manifest as img
from ...core.errors import DataError
from ...image.tree import MODE_FILE, MODE_TREE, TreeWriter, lookup
from .identity import BaseModel
from .store import TensorIndex

ROOT = b"model"
BASE = b"model/base.json"
ADAPTER = b"model/adapter"
DELTA = b"model/delta"
CONFIG_NAME = b"adapter_config.json"
INDEX_NAME = b"tensors.json"
PARTS = (BASE, ADAPTER, DELTA)


@dataclass(frozen=True)
class Adapter:
    config: bytes  # adapter_config.json as given
    index: TensorIndex

    @property
    def config_json(self) -> dict:
        try:
            doc = json.loads(self.config)
        except ValueError as e:
            raise DataError(f"adapter_config.json is damaged ({e})") from None
        if not isinstance(doc, dict):
            raise DataError("adapter_config.json is not a JSON object")
        return doc


@dataclass(frozen=True)
class ModelState:
    base: BaseModel | None = None
    adapter: Adapter | None = None
    delta: TensorIndex | None = None

    @property
    def empty(self) -> bool:
        return self.base is None and self.adapter is None and self.delta is None

    def with_parts(self, **parts) -> "ModelState":
        return replace(self, **{k: v for k, v in parts.items() if v is not None})

    def changes(self, writer: TreeWriter) -> dict[bytes, tuple[int, bytes] | None]:
        """Tree edits that make an image's model layer equal this state."""
        out: dict[bytes, tuple[int, bytes] | None] = {p: None for p in PARTS}
        if self.base is not None:
            out[BASE] = (MODE_FILE, writer.write_blob(self.base.encode()))
        if self.adapter is not None:
            entries = [(CONFIG_NAME, MODE_FILE, writer.write_blob(self.adapter.config)),
                       (INDEX_NAME, MODE_FILE, writer.write_blob(self.adapter.index.encode()))]
            out[ADAPTER] = (MODE_TREE, writer.write(entries))
        if self.delta is not None:
            out[DELTA] = (MODE_TREE, writer.write([(INDEX_NAME, MODE_FILE, writer.write_blob(self.delta.encode()))]))
        return out

    def summary(self) -> dict | None:
        """The manifest ``layers.model`` entry (flat, as other layers'); None when the layer is empty."""
        if self.empty:
            return None
        out: dict = {}
        if self.base is not None:
            out["base"] = self.base.label()
        if self.adapter is not None:
            cfg = self.adapter.config_json
            out.update(peft_type=cfg.get("peft_type"), r=cfg.get("r"), lora_alpha=cfg.get("lora_alpha"),
                       **_index_summary(self.adapter.index))
        if self.delta is not None:
            out.update({f"delta_{k}": v for k, v in _index_summary(self.delta).items()})
        return out

    def object_ids(self) -> list[str]:
        ids = self.adapter.index.object_ids() if self.adapter else []
        return list(dict.fromkeys(ids + (self.delta.object_ids() if self.delta else [])))


def _index_summary(index: TensorIndex) -> dict:
    return {"tensors": len(index.tensors), "parameters": index.parameters, "bytes": index.size}


def part_ids(git, tree: str | None) -> dict[bytes, tuple[int, bytes] | None]:
    """``(mode, raw oid)`` of each model part in ``tree`` (None when absent): cheap equality."""
    raw = bytes.fromhex(tree) if tree else None
    return {p: (lookup(git, raw, p) if raw else None) for p in PARTS}


def read_state(git, tree: str | None) -> ModelState:
    """The model layer of the image tree ``tree`` (empty when it has none)."""
    if tree is None:
        return ModelState()
    base_raw = img.read_file(git, tree, BASE)
    config = img.read_file(git, tree, ADAPTER + b"/" + CONFIG_NAME)
    index = img.read_file(git, tree, ADAPTER + b"/" + INDEX_NAME)
    delta = img.read_file(git, tree, DELTA + b"/" + INDEX_NAME)
    if (config is None) != (index is None):
        raise DataError("model/adapter is damaged (needs both adapter_config.json and tensors.json)")
    return ModelState(
        base=BaseModel.decode(base_raw) if base_raw is not None else None,
        adapter=Adapter(config, TensorIndex.decode(index, "model/adapter/tensors.json")) if config is not None else None,
        delta=TensorIndex.decode(delta, "model/delta/tensors.json") if delta is not None else None,
    )


def image_object_ids(git, tree: str) -> list[str]:
    """Every side-store object the model layer of image tree ``tree`` needs."""
    return read_state(git, tree).object_ids()
