"""The merge engine: find the ancestor, merge every layer, write one image with two parents.

Layers merge in the registry's order (``git_pf.layers.registry``), each through its
``LayerMerger``; a layer with a two-phase merge (``Layer.merge_start``: the world's git
merge) is started first and finished in its turn, and the plug-ins (model, cache) merge
last; ``--prefer LAYER=SIDE`` takes a layer wholesale from one side instead. Paths no
layer claims merge path-wise as the "other" layer. Every layer file of the merged tree
must parse (``layercheck``), whichever side it came from. Only when every layer is clean
is the image written: objects first (the merged tree and, unless it is signed, the merge
commit in one pack), then the branch moved by compare-and-swap, so a conflict or a failure
leaves no image and no ref (at most objects nothing references). Both sides' worlds and
the result's are checked by ``safepath.check_image`` (the sides' while git merges the worlds,
before anything reads them; ``MergeContext.check_sides``): an unsafe one is refused (exit 3)
with no image and no ref moved. No layer is named here.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass, field

from ..core import canonjson, config
from ..image import manifest as img, layercheck, refs, signing
from ..image import verify as signing_verify
from ..core.errors import DataError, PfError, UsageError
from ..image.tree import lookup
from ..store.packfile import packed
from ..image.manifest import ImageInfo
from ..layers import registry
from .layer import PLUGINS, LayerResult, MergeContext, check_worlds
from .tree3 import entry, merge_paths

SIDES = ("ours", "theirs")


def layer_names() -> list[str]:
    """Every registered layer, in merge order."""
    return [layer.name for layer in registry.layers()]


def claims(name: str) -> list[bytes]:
    layer = registry.get(name)
    return list(layer.claims) if layer is not None else [name.encode()]


def _summary_key(name: str) -> tuple[str, tuple[str, ...] | None]:
    """The manifest entry a layer's summary goes to, and the fields of it the layer owns."""
    layer = registry.get(name)
    return (layer.manifest_key, layer.summary_fields) if layer is not None else (name, None)


def _merger(name: str):
    return registry.get(name).make_merger()


@dataclass
class MergeRequest:
    theirs: str
    into: str | None = None
    dry_run: bool = False
    prefer: dict[str, str] = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    accept_duplicate_effects: bool = False
    no_ff: bool = False
    allow_unrelated: bool = False


@dataclass
class MergeResult:
    status: str  # "merged" | "conflict" | "up-to-date" | "fast-forward"
    branch: str
    ours: ImageInfo
    theirs: ImageInfo
    theirs_name: str
    bases: list[str] = field(default_factory=list)
    layers: list[LayerResult] = field(default_factory=list)
    image: ImageInfo | None = None  # the image the branch now points at (None: unchanged, or dry run)
    dry_run: bool = False
    checkout: str | None = None  # where a conflicted world was written (--checkout)
    context: MergeContext | None = field(default=None, repr=False, compare=False)

    @property
    def clean(self) -> bool:
        return self.status != "conflict"

    def to_json(self) -> dict:
        from .report import to_json

        return to_json(self)


def parse_prefer(items) -> dict[str, str]:
    """``LAYER=ours|theirs`` strings (or a mapping) -> {layer: side}, validated."""
    pairs = items.items() if isinstance(items, dict) else [str(i).partition("=")[::2] for i in items or []]
    out = {}
    for layer, side in pairs:
        if layer not in layer_names() or side not in SIDES:
            raise UsageError(f"expected LAYER=ours|theirs with LAYER one of {','.join(layer_names())}, "
                             f"got '{layer}={side}'", param="prefer")
        out[layer] = side
    return out


def _branch(git, into: str | None) -> str:
    name = into if into not in (None, "HEAD", "@") else refs.current_branch(git)
    if name is None:
        raise UsageError("no current branch to merge into (use --into BRANCH)")
    if name.startswith(refs.HEADS):
        name = name[len(refs.HEADS):]
    if refs.branch_tip(git, refs.check_name(name)) is None:
        raise UsageError(f"no such branch '{name}'", param="into")
    return name


def start(repo, req: MergeRequest) -> MergeResult | MergeContext:
    """Resolve both sides and the ancestor; a finished result when no layer merge is needed."""
    git = repo.git
    branch = _branch(git, req.into)
    ours = img.read_image(git, refs.branch_tip(git, branch))
    theirs = img.read_image(git, refs.resolve(git, req.theirs))
    for image, rev in ((ours, branch), (theirs, req.theirs)):
        signing_verify.check_use(git, image.id, rev)
    sides = [(image.tree, f"image {image.short}") for image in (ours, theirs)]
    done = lambda status, image=None: MergeResult(status, branch, ours, theirs, req.theirs, image=image,  # noqa: E731
                                                  dry_run=req.dry_run)
    if theirs.id == ours.id or git.descendant_of(ours.id, theirs.id):
        check_worlds(git, sides)
        return done("up-to-date")
    bases = next(found for layer in registry.layers()
                 if (found := layer.merge_bases(git, repo.git_dir, ours.id, theirs.id)) is not None)
    if not bases and not req.allow_unrelated:
        check_worlds(git, sides)
        raise UsageError(f"refusing to merge unrelated images {ours.short} and {theirs.short} "
                         "(use --allow-unrelated-histories)")
    if bases == [ours.id] and not req.no_ff:
        check_worlds(git, sides)
        layercheck.check(git, theirs)  # the branch never moves to an image whose layers do not parse
        if not req.dry_run:
            refs.update_branch(git, branch, theirs.id, ours.id, f"pf merge {req.theirs}: fast-forward")
        result = done("fast-forward", None if req.dry_run else theirs)
        result.bases = bases
        return result
    options = dict(req.options)
    for layer in registry.layers():
        options.update(layer.merge_options(req))
    base_images = [img.read_image(git, b) for b in bases]  # each read once
    return MergeContext(repo, base_images[0] if base_images else None, ours, theirs, options,
                        bases=base_images, ours_name=branch, theirs_name=req.theirs,
                        dry_run=req.dry_run, unchecked=sides)


def run_layers(ctx: MergeContext, prefer: dict[str, str], skip: tuple[str, ...] = ()) -> list[LayerResult]:
    """Every layer's result, in layer order. A two-phase merge (git's world merge) is started
    first and collected in its turn, after the layers that merge while it runs; both sides'
    worlds are checked while it runs too (``ctx.unchecked``), before any layer's result is taken.
    A refusal or a failure stops what was started (git's merge)."""
    names = [n for n in layer_names() if n not in skip and (n not in PLUGINS or _present(ctx, n))]
    started = {n: found for n in names if n not in prefer and (found := registry.get(n).merge_start(ctx)) is not None}
    order = [n for n in names if n not in started and n not in PLUGINS]  # the plug-ins last: cache reads the trace
    order += [n for n in names if n not in order]
    done: dict[str, LayerResult] = {}
    try:
        ctx.check_sides()  # done already when the world's merge started git (it checks them while git runs)
        for i, name in enumerate(order):
            if name in started and not ctx.parsed:  # while git merges: what no layer left can change
                parse_ahead(ctx, done, order[i:])
            if name in prefer:
                result = take_side(ctx, name, prefer[name])
            else:
                result = (started.get(name) or _merger(name)).merge(ctx)
            done[name] = ctx.results[name] = result
    except BaseException:
        for merger in started.values():
            if hasattr(merger, "cancel"):
                merger.cancel()
        raise
    results = [done[n] for n in names]
    other = _other(ctx)
    if other is not None:
        results.append(other)
    return results


def parse_ahead(ctx: MergeContext, done: dict[str, LayerResult], pending: list[str]) -> None:
    """Parse the layer files the merge result will hold that no layer in ``pending`` can change
    (as the layers merged so far left them, or ours'), into ``ctx.parsed``; ``_check_parses``
    skips a path still holding the blob parsed here. One that does not parse is left to it."""
    git = ctx.repo.git
    changes: dict[bytes, object] = {}
    for r in done.values():
        changes.update(r.changes)
    held = [c for n in pending for c in claims(n)] + [img.MANIFEST]
    held += [p for p in changes if p not in layercheck.PARSERS]  # a directory set whole
    for path in layercheck.PARSERS:
        if any(path == c or path.startswith(c + b"/") for c in held):
            continue  # a layer still merging, or a change of a directory above it, decides it
        found = changes[path] if path in changes else lookup(git, bytes.fromhex(ctx.ours.tree), path)
        if found is not None and layercheck.parses(git, path, found):
            ctx.parsed[path] = found[1]


def _present(ctx: MergeContext, name: str) -> bool:
    return any(entry(ctx.repo.git, i, name.encode()) is not None for i in (ctx.ours, ctx.theirs, *ctx.bases))


def take_side(ctx: MergeContext, name: str, side: str) -> LayerResult:
    """The whole layer as one side has it (``--prefer LAYER=SIDE``), unless the layer refuses
    (``Layer.take_side``: the effects layer when that would not keep ours' ledger as a prefix)."""
    layer = registry.get(name)
    refused = layer.take_side(ctx, side) if layer is not None else None
    if refused is not None:
        return refused
    git = ctx.repo.git
    image = ctx.ours if side == "ours" else ctx.theirs
    changes = {} if side == "ours" else {p: entry(git, image, p) for p in claims(name)}
    summary = None
    if side == "theirs":
        key, fields = _summary_key(name)
        found = image.manifest.get("layers", {}).get(key)
        summary = {k: found[k] for k in fields if k in found} if found and fields else found
    parsed = {p: layercheck.load(git, image, p) for p in layercheck.PARSERS  # a side taken whole must parse
              if any(p == c or p.startswith(c + b"/") for c in claims(name))}
    if layer is not None:
        layer.side_taken(ctx, parsed)
    return LayerResult(name, True, changes, summary, {"resolution": f"{side} (--prefer)"},
                       trailer=f"{name} prefer-{side}")


def _other(ctx: MergeContext) -> LayerResult | None:
    """Paths no layer claims (future layers): path-wise three-way."""
    claimed = {p for n in layer_names() for p in claims(n)} | {img.MANIFEST}
    changes, conflicts = merge_paths(ctx.repo.git, ctx.bases, ctx.ours, ctx.theirs, claimed.__contains__)
    if not changes and not conflicts:
        return None
    lines = [f"CONFLICT (other): '{p.decode('utf-8', 'replace')}' changed differently on both sides" for p in conflicts]
    return LayerResult("other", not lines, changes, None, {"resolution": "merged", "from_theirs": len(changes)},
                       lines, f"other merged paths={len(changes)}")


def build_tree(ctx: MergeContext, results: list[LayerResult]) -> str:
    """The merged image tree, written and checked (every layer file parses)."""
    return _write_tree(ctx, results, commit=False)[0]


def _write_tree(ctx: MergeContext, results: list[LayerResult], commit: bool) -> tuple[str, str | None]:
    """The merged image tree and, with ``commit``, the merge commit on it, written as one pack
    (a commit names its tree by id: it needs nothing read back), then the tree checked as
    ``build_tree`` checks it; (tree, commit id or None). The commit is referenced only once
    ``write_image`` has checked the world and moves the branch: a refused merge leaves it
    unreferenced, as it leaves the tree."""
    git = ctx.repo.git
    edit = img.TreeEdit(git, ctx.ours.tree)
    layers = copy.deepcopy(ctx.ours.manifest.get("layers", {}))
    for r in results:
        edit.changes.update(r.changes)
        key, fields = _summary_key(r.layer)
        if r.summary is not None:
            if fields:
                layers.setdefault(key, {}).update(r.summary)
            else:
                layers[key] = r.summary
        if r.layer in PLUGINS and r.changes.get(r.layer.encode(), 0) is None:
            layers.pop(r.layer, None)  # the layer was removed
    for layer in registry.layers():  # the parts a layer summarises apart (the tape, the process table)
        layers.update(layer.merged_summaries(git, ctx.ours.tree, edit.changes))
    manifest = dict(ctx.ours.manifest, layers=layers)
    with packed(git):  # the merged tree in one pack, read back below: no loose object (docs/format.md)
        edit.put_file(img.MANIFEST, canonjson.encode(manifest))
        tree = edit.write()
        commit_id = _commit(ctx, results, tree) if commit else None
    skip = {p for p, oid in ctx.parsed.items()  # parsed while git merged, and still the blob there
            if (edit.changes[p][1] if p in edit.changes and edit.changes[p] else None) == oid
            or (p not in edit.changes and not any(p.startswith(c + b"/") for c in edit.changes))}
    _check_parses(ctx, tree, skip)
    return tree, commit_id


def _check_parses(ctx: MergeContext, tree: str, skip=frozenset()) -> None:
    """Every layer file of the merged tree parses, whichever side it came from, so a merge
    never writes an image holding a layer it could not parse; a DataError names the side.
    ``skip``: paths whose blob was parsed already (``parse_ahead``)."""
    git = ctx.repo.git
    for path, line in layercheck.problems(git, tree, skip).items():
        found = lookup(git, bytes.fromhex(tree), path)
        side = next((i for i in (ctx.theirs, ctx.ours) if entry(git, i, path) == found), None)
        raise DataError(f"{f'image {side.short}' if side else 'the merge result'}: {line}")




def _subject(ctx: MergeContext) -> str:
    return f"merge {ctx.theirs_name} into {ctx.ours_name}"


def _commit(ctx: MergeContext, results: list[LayerResult], tree: str) -> str:
    """The merge commit on ``tree`` (ours, then theirs), into the pack being written; its id."""
    git = ctx.repo.git
    agent = ctx.ours.manifest.get("agent") or {}
    trailers = [("Pf-Agent", img.Agent(**agent).label())] if agent.get("kind") else []
    trailers += [("Pf-Merge", r.trailer) for r in results if r.trailer]
    message = img.format_message(_subject(ctx), trailers)
    sig = config.signature(git)
    return signing.write_commit(git, sig, sig, message, tree, [ctx.ours.id, ctx.theirs.id])


def _unsigned(git) -> bool:
    """Whether image commits are written unsigned here (a configuration the signer refuses
    counts as signed: the merge then says so where it always did, after its checks)."""
    try:
        return signing.signer(git) is None
    except PfError:
        return False


def write_image(ctx: MergeContext, results: list[LayerResult], tree: str, commit: str | None = None) -> ImageInfo:
    """Check the merged world, write the merge commit (unless ``commit``: written already, with
    the tree) and move the branch to it by compare-and-swap; the image."""
    git = ctx.repo.git
    check_worlds(git, [(tree, "merge result")], likes=(ctx.ours.tree, ctx.theirs.tree))
    if commit is None:
        with packed(git):  # no loose object (docs/format.md)
            commit = _commit(ctx, results, tree)
    refs.update_branch(git, ctx.ours_name, commit, ctx.ours.id, f"pf merge: {_subject(ctx)}")
    return img.read_image(git, commit)


def merge(repo, req: MergeRequest) -> MergeResult:
    prefer = parse_prefer(req.prefer)
    started = start(repo, req)
    if isinstance(started, MergeResult):
        return started
    ctx = started
    results = run_layers(ctx, prefer)
    result = MergeResult("merged", ctx.ours_name, ctx.ours, ctx.theirs, req.theirs, [b.id for b in ctx.bases],
                         results, dry_run=req.dry_run, context=ctx)
    clean = all(r.clean for r in results)
    # the commit goes into the tree's pack (one pack write), unless it is signed: a signature waits
    # for the checks of what it signs
    tree, commit = _write_tree(ctx, results, clean and not req.dry_run and _unsigned(ctx.repo.git))
    if not clean:  # a dry run and a conflict too wrote and checked the tree: they fail as the merge
        result.status = "conflict"  # would (a conflict never hands on a layer the result could not read)
        return result
    if not req.dry_run:
        result.image = write_image(ctx, results, tree, commit)
    return result
