"""``git pf model-merge``: merge N images' adapters (and deltas) N-way into a new image.

Task vectors are taken against a base: ``--base REV``, ``--base none`` (zero:
the plain N-way merge of mergekit / peft), or by default the images' common
ancestor's model layer (zero when it has none). The new image is the first
image's state with the merged model layer, on a new branch; its one parent
is the first image, and its trailers record the method, the seed and every
source image. Writes the branch ref last; refuses an existing branch.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...core import canonjson, config
from ...image import manifest as img, refs, signing, verify
from ...core.errors import UsageError
from ...image.tree import TreeWriter
from .options import MergeRefused, MergeSpec
from .state import ModelState, read_state


@dataclass(frozen=True)
class ModelMergeResult:
    image: img.ImageInfo
    branch: str
    base: str | None  # the image whose model layer was the base; None for zero
    report: dict

    def to_json(self) -> dict:
        return {"id": self.image.id, "branch": self.branch, "base": self.base, **self.report}


def _base_image(repo, images: list[img.ImageInfo], base: str | None) -> img.ImageInfo | None:
    if base is not None:
        return None if base.lower() == "none" else repo.resolve(base)
    found = repo.git.merge_base_many([img_.id for img_ in images])
    if found is None:
        return None
    try:
        return img.read_image(repo.git, str(found))
    except UsageError:
        return None  # the common ancestor is not an image


def _part(states: list[ModelState], attr: str, images: list[img.ImageInfo]):
    values = [getattr(s, attr) for s in states]
    if all(v is None for v in values):
        return None
    missing = [i.short for i, v in zip(images, values) if v is None]
    if missing:
        raise UsageError(f"image {missing[0]} has no {attr}; every image must have one to merge")
    return values


def _check_base_models(states: list[ModelState], images: list[img.ImageInfo]) -> None:
    for state, image in zip(states[1:], images[1:]):
        if state.base != states[0].base:
            first = states[0].base.label() if states[0].base else "none"
            other = state.base.label() if state.base else "none"
            raise UsageError(f"images {images[0].short} and {image.short} use different base models ({first} vs {other})")


def _merged_state(repo, states, base_state, images, spec) -> tuple[ModelState, dict]:
    try:
        from . import combine
    except ImportError as e:
        raise UsageError(f"model-merge needs torch (install git-pf[model]): {e}") from None
    names = [i.short for i in images]
    adapters, deltas = _part(states, "adapter", images), _part(states, "delta", images)
    if adapters is None and deltas is None:
        raise UsageError("none of the images has an adapter or a delta to merge")
    merged, report = states[0], {}
    try:
        if adapters is not None:
            out = combine.merge_adapters(repo.store, adapters, base_state.adapter, spec, names)
            merged, report["adapter"] = merged.with_parts(adapter=out.stored), out.report
        if deltas is not None:
            out = combine.merge_deltas(repo.store, deltas, base_state.delta, spec, names)
            merged, report["delta"] = merged.with_parts(delta=out.stored), out.report
    except MergeRefused as e:
        raise UsageError(f"model-merge: {e}") from None
    return merged, report


def model_merge(repo, revs: list[str], spec: MergeSpec, name: str, base: str | None = None,
                message: str | None = None) -> ModelMergeResult:
    if len(revs) < 2:
        raise UsageError("model-merge needs at least two images")
    branch = refs.check_name(name)
    if refs.branch_tip(repo.git, branch) is not None:
        raise UsageError(f"branch '{branch}' already exists")
    images = [repo.resolve(r) for r in revs]
    for image, rev in zip(images, revs):  # each side is checked as its own commit
        verify.check_use(repo.git, image.id, rev)
    spec.check_sides(len(images))
    states = [read_state(repo.git, i.tree) for i in images]
    _check_base_models(states, images)
    base_image = _base_image(repo, images, base)
    base_state = read_state(repo.git, base_image.tree) if base_image else ModelState()
    merged, report = _merged_state(repo, states, base_state, images, spec)
    image = _commit(repo, images, merged, spec, report, branch, message)
    return ModelMergeResult(image, branch, base_image.id if base_image else None, report)


def _commit(repo, images, merged: ModelState, spec, report, branch, message) -> img.ImageInfo:
    git, first = repo.git, images[0]
    edit = img.TreeEdit(git, first.tree)
    edit.changes.update(merged.changes(TreeWriter(git)))
    layers = dict(first.manifest.get("layers", {}), model=merged.summary())
    agent = img.Agent(**first.manifest.get("agent", {}))
    edit.put_file(img.MANIFEST, canonjson.encode(img.make_manifest(agent, first.manifest.get("label", ""), layers)))
    tree = edit.write()
    rank = report.get("adapter", {}).get("rank")
    trailers = [("Pf-Merge", spec.trailer(rank))] + [("Pf-Model-Source", i.id) for i in images]
    subject = message or f"model-merge of {len(images)} images ({spec.method})"
    sig = config.signature(git)
    commit = signing.write_commit(git, sig, sig, img.format_message(subject, trailers), tree, [first.id])
    refs.update_branch(git, branch, str(commit), None, f"pf model-merge: {subject}")
    return img.read_image(git, str(commit))
