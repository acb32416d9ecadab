"""Finding the merger of a plugged-in layer (model, cache), and the default used without one.

``layer.PLUGINS`` maps a layer name to ``"module:ClassName"``; the module is
imported (by the registry's one loader, ``registry.load``) only when an image being
merged has that layer, so the core never imports torch. Without a plug-in (or when it cannot be imported) the layer
merges by side: one side changed takes it; both changed is a conflict that
names the extra to install.
"""
from __future__ import annotations

from ..layers import registry
from .layer import PLUGINS, LayerResult, MergeContext
from .tree3 import base_entry, entry, pick

EXTRA = "pip install 'git-pf[model]'"


class DefaultLayerMerger:
    """One side changed takes it; both changed is a conflict naming the needed extra."""

    def __init__(self, name: str, why: str = ""):
        self.name = name
        self.why = why

    def merge(self, ctx: MergeContext) -> LayerResult:
        git, path = ctx.repo.git, self.name.encode()
        b, o, t = base_entry(git, ctx.bases, path), entry(git, ctx.ours, path), entry(git, ctx.theirs, path)
        choice = pick(b, o, t)
        report = {"resolution": choice, "merger": "default"}
        if choice == "theirs":
            summary = ctx.theirs.manifest.get("layers", {}).get(self.name)
            return LayerResult(self.name, True, {path: t}, summary, report, trailer=f"{self.name} theirs")
        if choice != "both":
            return LayerResult(self.name, True, report=report, trailer=f"{self.name} {choice}")
        line = (f"CONFLICT ({self.name}): both sides changed the {self.name} layer; merging it needs the model extra "
                f"({EXTRA}){': ' + self.why if self.why else ''}")
        return LayerResult(self.name, False, report=dict(report, resolution="conflict"), conflicts=[line],
                           trailer=f"{self.name} conflict")


def merger_for(name: str):
    spec = PLUGINS.get(name)
    if not spec:
        return DefaultLayerMerger(name)
    try:
        return registry.load(spec)()
    except (ImportError, AttributeError) as e:
        return DefaultLayerMerger(name, f"the {name} merger cannot be loaded ({e})")
