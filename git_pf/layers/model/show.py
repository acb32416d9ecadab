"""The model layer's part of ``git pf diff``, ``show`` and ``fsck``: which parts (base identity,
adapter, delta) and which tensors changed between two images, the tensors an image changed
from its first parent, and the adapter config's check. Reads indexes and configs, never tensor
bytes; never imports torch. Writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...core.errors import DataError
from ..base import DiffPart
from .state import ADAPTER, BASE, DELTA, ModelState, part_ids, read_state

PART_NAMES = {BASE: "base", ADAPTER: "adapter", DELTA: "delta"}


def _tensors(state: ModelState) -> dict[str, str]:
    """``part/tensor name`` -> sha256 of each adapter and delta tensor."""
    out = {f"adapter/{t.name}": t.sha256 for t in (state.adapter.index.tensors if state.adapter else ())}
    out.update({f"delta/{t.name}": t.sha256 for t in (state.delta.tensors if state.delta else ())})
    return out


@dataclass
class ModelDiff(DiffPart):
    parts: list[str] = field(default_factory=list)  # base, adapter, delta: each part that differs
    tensors_added: list[str] = field(default_factory=list)  # "adapter/NAME" or "delta/NAME"
    tensors_changed: list[str] = field(default_factory=list)
    tensors_removed: list[str] = field(default_factory=list)

    def lines(self, stat: bool = False, patch: bool = False) -> list[str]:
        out = [f"model:   {len(self.tensors_added)} added, {len(self.tensors_changed)} changed, "
               f"{len(self.tensors_removed)} removed tensors" + (f" ({', '.join(self.parts)} changed)" if self.parts else "")]
        if not stat:
            out += [f"  {mark} {name}" for mark, names in (("A", self.tensors_added), ("M", self.tensors_changed),
                                                            ("D", self.tensors_removed)) for name in names]
        return out


def compare(git, tree_a: str | None, tree_b: str | None) -> ModelDiff | None:
    """The model diff of two image trees; None when neither holds a model layer."""
    ids_a, ids_b = part_ids(git, tree_a), part_ids(git, tree_b)
    if not any(ids_a.values()) and not any(ids_b.values()):
        return None
    parts = [PART_NAMES[p] for p in PART_NAMES if ids_a[p] != ids_b[p]]
    if not parts:
        return ModelDiff()
    ta, tb = _tensors(read_state(git, tree_a)), _tensors(read_state(git, tree_b))
    return ModelDiff(parts, sorted(tb.keys() - ta.keys()), sorted(k for k in ta.keys() & tb.keys() if ta[k] != tb[k]),
                     sorted(ta.keys() - tb.keys()))


def diff(git, a, b) -> ModelDiff | None:
    return compare(git, a.tree, b.tree)


@dataclass(frozen=True)
class ModelShow:
    changed: ModelDiff  # from the first parent (or from nothing)

    def to_json(self) -> dict:
        return {"from_parent": self.changed.to_json()}

    def lines(self) -> list[str]:
        d = self.changed
        return [f"{'':<8} from parent: {len(d.tensors_added)} added, {len(d.tensors_changed)} changed, "
                f"{len(d.tensors_removed)} removed tensors"]


def summary(repo, image) -> ModelShow | None:
    """The tensors ``image`` changed from its first parent; None when the image has no model layer."""
    from ...image.manifest import read_image

    git = repo.git
    if not any(part_ids(git, image.tree).values()):
        return None
    parent = None
    if image.parents:
        try:
            parent = read_image(git, image.parents[0]).tree
        except DataError:
            parent = None
    return ModelShow(compare(git, parent, image.tree) or ModelDiff())


def problems(git, store, image, out: list[str], seen: set[str], remote_has) -> None:
    """fsck: the adapter's config must be a JSON object (a damaged index is the object check's)."""
    try:
        state = read_state(git, image.tree)
    except DataError:
        return  # reported once, by the layer's object references
    if state.adapter is not None:
        try:
            state.adapter.config_json
        except DataError as e:
            out.append(f"image {image.short}: model: {e.message}")
