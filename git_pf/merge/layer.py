"""The per-layer merge interface that every layer (built in or plugged in) implements.

A merger gets the three images and returns the tree changes for its own
paths, a manifest summary, a report and its conflicts. It must not write
refs or commits; the engine writes the merge image only when every layer is
clean. Every layer names its merger in the registry (``git_pf.layers.registry``);
``PLUGINS`` lists those that need the model extra (model, cache), as
``"module:ClassName"`` strings so the core never imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.errors import DataError
from ..image import manifest as img, safepath
from ..image.manifest import ImageInfo
from ..layers import registry

Change = tuple[int, bytes] | None  # (git file mode, raw oid) or None to delete the path


@dataclass
class MergeContext:
    repo: Any  # git_pf.Repo
    base: ImageInfo | None  # None when the two images share no history
    ours: ImageInfo
    theirs: ImageInfo
    options: dict[str, Any] = field(default_factory=dict)  # per-layer flags, e.g. {"model.method": "ties"}
    results: dict[str, "LayerResult"] = field(default_factory=dict)  # layers merged so far (trace before cache)
    merged_messages: list[dict] | None = None  # set by the trace merger; the cache merger keeps pages that prefix it
    bases: list[ImageInfo] = field(default_factory=list)  # every merge base, best first (several: criss-cross)
    ours_name: str = ""  # the branch merged into
    theirs_name: str = ""  # THEIRS as the user named it
    dry_run: bool = False  # report only: nothing is written and no external summariser runs
    unchecked: list[tuple[str, str]] = field(default_factory=list)  # (image tree, its name): worlds not yet
    # checked (``check_sides``)
    parsed: dict[bytes, bytes] = field(default_factory=dict)  # layer file path -> the blob (raw id) parsed
    # there while git merged (``engine.parse_ahead``): the result's check skips it when it holds that blob

    def check_sides(self) -> None:
        """Check the worlds still ``unchecked`` (both sides', left by the engine so that they are
        checked while git merges them): a two-phase merge calls this once its background work
        is started and before it reads a world itself; the engine calls it before any layer."""
        pending, self.unchecked = self.unchecked, []
        check_worlds(self.repo.git, pending)


def check_merged_tree(ctx: "MergeContext", world_tree: str) -> None:
    """Check git's merged world tree (before the merge result's attrs exist; the engine checks
    the whole result again, at the cost of its attrs): a DataError names the merge result."""
    git = ctx.repo.git
    likes = tuple(img.subtree(git, side.tree, img.WORLD_FS) for side in (ctx.ours, ctx.theirs))
    try:
        safepath.check_tree(git, world_tree, likes=likes)
    except DataError as e:
        raise DataError(f"merge result: {e.message}", e.code) from None


def check_worlds(git, worlds: list[tuple[str, str]], likes: tuple[str, ...] = ()) -> None:
    """Refuse (DataError, prefixed with the image's name) a world with an unsafe name or attrs
    path (``safepath.check_image``), for each ``(image tree, name)`` in turn. The worlds of
    ``likes`` (images found sound or marked; any other is ignored) and of each image checked
    before lend their trees to the next as counterparts: what they share is not read again."""
    for tree, what in worlds:
        try:
            safepath.check_image(git, tree, likes=likes)
        except DataError as e:
            raise DataError(f"{what}: {e.message}", e.code) from None
        likes = (*likes, tree)


@dataclass
class LayerResult:
    layer: str
    clean: bool
    changes: dict[bytes, Change] = field(default_factory=dict)  # image-tree paths to set or delete
    summary: dict | None = None  # manifest "layers" entry for this layer; None keeps ours
    report: dict = field(default_factory=dict)  # what the CLI shows / prints as JSON
    conflicts: list[str] = field(default_factory=list)  # one line each
    trailer: str = ""  # value of this layer's "Pf-Merge:" trailer, e.g. "model ties seed=7"
    detail: Any = None  # the merger's own data for the engine (not reported)


class LayerMerger(Protocol):
    name: str

    def merge(self, ctx: MergeContext) -> LayerResult: ...


# Plugged-in layers, imported lazily by the engine: layer name -> "module:ClassName".
PLUGINS: dict[str, str] = {layer.name: layer.merger for layer in registry.layers() if layer.needs_extra}
