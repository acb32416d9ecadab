"""Taking a snapshot: capture the world, take or inherit each layer, write one image.

Order of writes: git objects and side-store objects first, the branch ref
last (compare-and-swap), so an interrupted snapshot leaves no ref and only
unreferenced objects that ``git gc`` / ``git pf gc`` remove. The world is
captured first (the request's ``WorldSource``, else the root layer's ``DirWorld``);
then each registered layer writes what the request gives it (``SnapshotRequest.inputs``:
layer name -> that layer's input), or what it inherits from the parent image, through
its ``Layer.input`` (``SnapshotWrite``); by default the ``LayerInput``s named as it,
else the parent's files and summary kept. A layer may add a trailer (the effects
layer's ``Pf-Rewrite-Effects``). No layer is named here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Protocol

from ..core import canonjson, config
from ..image import manifest as img, refs, signing
from . import maintenance
from ..core.errors import UsageError
from ..layers import registry
from ..image.safepath import resolve_fs_root  # noqa: F401  (where a sandbox path is checked; imported from here too)
from ..store.packfile import packing

Capture = Any  # a WorldSource's capture: ``tree``, ``attrs``, ``stats`` (the root layer's, ``Layer.source``)


class LayerInput(Protocol):
    """A part of a layer a snapshot is given as an object (model, cache, the tape, the process table).

    ``write`` adds the layer's files to ``edit`` (paths under its own top-level
    directory, e.g. ``model/``) and returns the manifest summary for ``name``."""

    name: str

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict: ...


class WorldSource(Protocol):
    """Where a snapshot's ``world/fs`` comes from: a sandbox directory (``DirWorld``, the
    default) or anything else that can build the tree, e.g. a mount's upper layer."""

    name: str  # used in the default subject, "snapshot of <name>"

    def capture(self, repo, parent: img.ImageInfo | None) -> Capture: ...

    def done(self, cap: Capture) -> None: ...


@dataclass(frozen=True, init=False)
class SnapshotRequest:
    """What one snapshot is asked to write. ``inputs`` maps a layer's name to that layer's
    input (``Layer.input_from`` builds one from the request keywords the layer takes, e.g.
    ``messages=``, ``effects=``, ``env=``); a layer given nothing inherits the parent's."""

    fs_root: Path
    branch: str | None = None
    agent: img.Agent = img.Agent()
    message: str | None = None
    label: str | None = None
    ignore: tuple[str, ...] = ()
    allow_empty: bool = False
    layers: tuple[LayerInput, ...] = ()
    world: WorldSource | None = None  # replaces the capture of fs_root when given
    parent: str | None = None  # the image the new one must follow (the branch must be absent or there)
    switch: bool = False  # make the branch current (else only when there is no current image)
    trailers: tuple[tuple[str, str], ...] = ()  # more Pf-* trailers for the commit (a run's Pf-Step: N)
    ref: str | None = None  # a full ref (refs/pf/...) the image goes on instead of a branch; HEAD is left alone
    inputs: Mapping[str, Any] = field(default_factory=dict)  # layer name -> that layer's input

    def __init__(self, fs_root: Path, branch: str | None = None, agent: img.Agent = img.Agent(),
                 message: str | None = None, label: str | None = None, ignore: tuple[str, ...] = (),
                 allow_empty: bool = False, layers: tuple[LayerInput, ...] = (), world: WorldSource | None = None,
                 parent: str | None = None, switch: bool = False, trailers: tuple[tuple[str, str], ...] = (),
                 ref: str | None = None, inputs: Mapping[str, Any] | None = None, **per_layer):
        given = dict(inputs or {})
        given.update(registry.inputs_from(per_layer))  # each layer builds its input from its keywords
        values = dict(fs_root=fs_root, branch=branch, agent=agent, message=message, label=label, ignore=ignore,
                      allow_empty=allow_empty, layers=layers, world=world, parent=parent, switch=switch,
                      trailers=trailers, ref=ref, inputs=given)
        for name, value in values.items():
            object.__setattr__(self, name, value)


@dataclass(frozen=True)
class SnapshotResult:
    image: img.ImageInfo
    branch: str
    unchanged: bool  # True when the state equals the parent's and no image was written
    stats: Any  # the capture's: files, bytes, pointers, files_read, skipped

    def to_json(self) -> dict:
        return {
            "id": self.image.id,
            "branch": self.branch,
            "unchanged": self.unchanged,
            "tree": self.image.tree,
            "files": self.stats.files,
            "bytes": self.stats.bytes,
            "pointers": self.stats.pointers,
            "files_read": self.stats.files_read,
            "dirs_listed": getattr(self.stats, "dirs_listed", 0),
            "warnings": self.stats.skipped,
        }


def rewrite_reason(value: bool | str | None) -> str | None:
    """The ``Pf-Rewrite-Effects`` trailer value for ``rewrite_effects``: None when not
    asked, the reason on one printable line, else "yes"."""
    if value is None or value is False:
        return None
    text = " ".join("".join(c if c.isprintable() else " " for c in value).split()) if isinstance(value, str) else ""
    return text or "yes"


class SnapshotWrite:
    """What a layer's snapshot writer (``Layer.input``) is handed: the request, the world's
    capture, the image tree being edited and the parent image. It adds the layer's files to
    ``edit``, may add commit ``trailers``, and returns its manifest summaries."""

    def __init__(self, repo, req: SnapshotRequest, capture: Capture, edit: img.TreeEdit, parent):
        self.repo, self.req, self.capture, self.edit, self.parent = repo, req, capture, edit, parent
        self.trailers: list[tuple[str, str]] = []
        self._pending = list(req.layers)  # the LayerInputs no layer has written yet

    def given(self, name: str) -> Any:
        """The request's input for the layer ``name`` (its own type), or None when none is given."""
        return self.req.inputs.get(name)

    def inherited(self, path: bytes, decode, default):
        """The parent's file at ``path``, decoded; ``default`` when there is no parent or no file."""
        if self.parent is not None:
            data = img.read_file(self.repo.git, self.parent.tree, path)
            if data is not None:
                return decode(data)
        return default

    def write_given(self, name: str | None = None) -> dict[str, dict]:
        """Write the request's ``LayerInput``s named ``name`` (None: every one not written yet),
        in the order given; their summaries by name."""
        out = {}
        for given in [x for x in self._pending if name is None or x.name == name]:
            self._pending.remove(given)
            out[given.name] = given.write(self.repo, self.edit, self.parent)
        return out


def __getattr__(name: str):
    """``DirWorld``, the default world source, as the registry's root layer provides it."""
    if name == "DirWorld":
        return registry.root().source
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _parent(git, full: str, branch: str, expected: str | None) -> tuple[str | None, img.ImageInfo | None]:
    """(current tip of the ref ``full`` (the branch ``branch``), parent image): the tip, or ``expected`` when given."""
    tip = refs.ref_tip(git, full)
    if expected is None:
        return tip, img.read_image(git, tip) if tip else None
    if tip is not None and tip != expected:
        raise UsageError(f"branch '{branch}' is at {tip[:12]}, not at {expected[:12]}; "
                         f"use --name to put the image on another branch")
    return tip, img.read_image(git, expected)


def take(repo, req: SnapshotRequest) -> SnapshotResult:
    """Write a snapshot image for ``req`` on ``repo`` (a ``git_pf.Repo``).

    Agent and label not given are inherited from the parent image."""
    git = repo.git
    world = req.world or registry.root().source(repo, req.fs_root, req.ignore)
    branch = req.ref or refs.check_name(req.branch or refs.current_branch(git) or refs.DEFAULT_BRANCH)
    full, what = (req.ref, None) if req.ref else (refs.HEADS + branch, f"branch '{branch}'")
    tip, parent = _parent(git, full, branch, req.parent)

    def move(new: str, old: str | None, log: str) -> None:
        refs.update_ref(git, full, new, old, log, what)
        if not req.ref:  # an image on a full ref (a blame trial) leaves HEAD alone
            _follow(git, branch, req.switch)
    # every git object of the image (its commit too) goes into one pack, written before the ref
    # moves: no loose object, so a gc at the same time has nothing of ours to pull away
    with packing(git) as pack:
        with repo.store.batch():  # one filesystem sync for every side-store object, before any ref moves
            cap, tree, agent, layer_trailers = _write_tree(repo, req, world, parent)
        if parent is None or tree != parent.tree or req.allow_empty:
            trailers = [("Pf-Agent", agent.label())] if agent.kind else []
            trailers += layer_trailers + list(req.trailers)
            message = img.format_message(req.message or f"snapshot of {world.name}", trailers)
            sig = config.signature(git)
            commit = signing.write_commit(git, sig, sig, message, tree, [parent.id] if parent else [], pack)
        pack.flush()

    if parent is not None and tree == parent.tree and not req.allow_empty:
        world.done(cap)
        if tip is None:
            move(parent.id, None, f"pf snapshot: branch at {parent.short}")
        elif not req.ref:
            _follow(git, branch, req.switch)
        return SnapshotResult(parent, branch, True, cap.stats)

    move(commit, tip, f"pf snapshot: {message.splitlines()[0]}")
    world.done(cap)
    maintenance.auto_gc(git)
    return SnapshotResult(img.read_image(git, str(commit)), branch, False, cap.stats)


def _follow(git, branch: str, switch: bool) -> None:
    """Make ``branch`` current when asked, or when there is no current image to keep: a
    snapshot onto another branch (a fork, a mount's branch) must not move a later bare merge."""
    current = refs.current_branch(git)
    if switch or current is None or (current != branch and refs.branch_tip(git, current) is None):
        refs.set_head(git, branch)


def _write_tree(repo, req: SnapshotRequest, world: WorldSource, parent) -> tuple[Capture, str, img.Agent, list]:
    """Capture the world and write every layer; the new image tree (no commit, no ref), and
    the trailers the layers add."""
    git = repo.git
    cap = world.capture(repo, parent)
    snap = SnapshotWrite(repo, req, cap, img.TreeEdit(git, parent.tree if parent else None), parent)
    fresh: dict[str, dict] = {}  # manifest key -> summary; two layers may share a key (world, env)
    for layer in registry.layers():
        written = layer.input(snap)
        for key, summary in written.items():
            fresh.setdefault(key, {}).update(summary)
    fresh.update(snap.write_given())  # inputs no layer takes: written as their own
    layers = dict(parent.manifest.get("layers", {})) if parent else {}
    layers.update(fresh)
    agent, label = _identity(req, parent)
    snap.edit.put_file(img.MANIFEST, canonjson.encode(img.make_manifest(agent, label, layers)))
    return cap, snap.edit.write(), agent, snap.trailers


def _identity(req: SnapshotRequest, parent) -> tuple[img.Agent, str]:
    """Agent and label: as given, else inherited from the parent image."""
    old = parent.manifest if parent else {}
    agent = req.agent if req.agent.kind else img.Agent(**old.get("agent", {})) if old else req.agent
    label = req.label if req.label is not None else old.get("label", "")
    return agent, label

