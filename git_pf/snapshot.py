"""Taking a snapshot: capture the world, take or inherit each layer, write one image.

Order of writes: git objects and side-store objects first, the branch ref
last (compare-and-swap), so an interrupted snapshot leaves no ref and only
unreferenced objects that ``git gc`` / ``git pf gc`` remove. Layers not given
are inherited from the parent image unchanged. A given effects ledger must
extend the parent's (docs/format.md §9) unless the request declares a
rewrite, which the commit records in a ``Pf-Rewrite-Effects`` trailer.
"""
from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from . import canonjson, config, image as img, maintenance, refs
from .layers.effects import ledger as effects_mod
from .layers.trace import messages as trace
from .errors import UsageError
from .layers.world import attrs as attrs_mod
from .layers.world.capture import Capture, CaptureStats, capture
from .layers.world.env import Env, redact
from .layers.world.statcache import StatCache


class LayerInput(Protocol):
    """A layer a snapshot writes besides world / trace / effects / env (model, cache, ...).

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


@dataclass(frozen=True)
class SnapshotRequest:
    fs_root: Path
    branch: str | None = None
    agent: img.Agent = img.Agent()
    messages: list[dict] | None = None
    effects: list[dict] | None = None
    env: Env | None = None
    no_redact: frozenset[str] = frozenset()
    message: str | None = None
    label: str | None = None
    ignore: tuple[str, ...] = ()
    allow_empty: bool = False
    layers: tuple[LayerInput, ...] = ()
    world: WorldSource | None = None  # replaces the capture of fs_root when given
    parent: str | None = None  # the image the new one must follow (the branch must be absent or there)
    rewrite_effects: str | None = None  # the reason a given ledger may drop or change the parent's entries
    switch: bool = False  # make the branch current (else only when there is no current image)
    trailers: tuple[tuple[str, str], ...] = ()  # more Pf-* trailers for the commit (a run's Pf-Step: N)


@dataclass(frozen=True)
class SnapshotResult:
    image: img.ImageInfo
    branch: str
    unchanged: bool  # True when the state equals the parent's and no image was written
    stats: CaptureStats

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
            "warnings": self.stats.skipped,
        }


def rewrite_reason(value: bool | str | None) -> str | None:
    """The ``Pf-Rewrite-Effects`` trailer value for ``rewrite_effects``: None when not
    asked, the reason on one printable line, else "yes"."""
    if value is None or value is False:
        return None
    text = " ".join("".join(c if c.isprintable() else " " for c in value).split()) if isinstance(value, str) else ""
    return text or "yes"


def resolve_fs_root(fs_root: Path, git_dir: Path) -> bytes:
    """The real absolute path of the sandbox, refusing ones that cannot be captured."""
    try:
        real = os.path.realpath(fs_root, strict=True)
    except FileNotFoundError:
        raise UsageError(f"'{fs_root}' does not exist", param="fs_root") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise UsageError(f"'{fs_root}' is a symlink loop", param="fs_root") from None
        raise UsageError(f"cannot resolve '{fs_root}': {e.strerror}", param="fs_root") from None
    if not os.path.isdir(real):
        raise UsageError(f"'{fs_root}' is not a directory", param="fs_root")
    if not os.access(real, os.R_OK | os.X_OK):
        raise UsageError(f"'{fs_root}' is not readable", param="fs_root")
    git_real = os.path.realpath(git_dir)
    if real == git_real or real.startswith(git_real + os.sep):
        raise UsageError(f"'{fs_root}' is inside the git directory", param="fs_root")
    return os.fsencode(real)


def _layer_summary(cap_stats: CaptureStats, messages: list[dict], ledger: list[dict], env: Env) -> dict:
    return {
        "world": {"files": cap_stats.files, "bytes": cap_stats.bytes, "pointers": cap_stats.pointers,
                  "env_vars": len(env.vars), "redacted": len(env.redacted)},
        "trace": {"messages": len(messages), "tokens_estimate": trace.estimate_tokens(messages)},
        "effects": {"entries": len(ledger),
                    "irreversible": sum(1 for e in ledger if e.get("side_effect_class") == "irreversible")},
    }


class DirWorld:
    """The default world source: a sandbox directory, captured with the stat cache."""

    def __init__(self, repo, fs_root: Path, ignore: tuple[str, ...]):
        self.repo, self.ignore = repo, ignore
        self.root = resolve_fs_root(fs_root, repo.git_dir)
        self.name = os.fsdecode(os.path.basename(self.root))
        self.cache: StatCache | None = None

    def capture(self, repo, parent) -> Capture:
        git = repo.git
        threshold = config.large_file_threshold(git)
        settings = (threshold, tuple(self.ignore))
        self.cache = StatCache.load(repo.git_dir, self.root, settings, lambda t: t in git.odb)
        exclude = {os.fsencode(os.path.realpath(repo.git_dir))}
        return capture(git, repo.store, self.root, threshold=threshold, ignore=list(self.ignore), cache=self.cache,
                       exclude=exclude)

    def done(self, cap: Capture) -> None:
        self.cache.save(self.root, cap.tree)


def _parent(git, branch: str, expected: str | None) -> tuple[str | None, img.ImageInfo | None]:
    """(current tip of ``branch``, parent image): the tip, or ``expected`` when given."""
    tip = refs.branch_tip(git, branch)
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
    world = req.world or DirWorld(repo, req.fs_root, req.ignore)
    branch = refs.check_name(req.branch or refs.current_branch(git) or refs.DEFAULT_BRANCH)
    tip, parent = _parent(git, branch, req.parent)
    with repo.store.batch():  # one filesystem sync for every side-store object, before any ref moves
        cap, tree, agent, rewritten = _write_tree(repo, req, world, parent)

    if parent is not None and tree == parent.tree and not req.allow_empty:
        world.done(cap)
        if tip is None:
            refs.update_branch(git, branch, parent.id, None, f"pf snapshot: branch at {parent.short}")
        _follow(git, branch, req.switch)
        return SnapshotResult(parent, branch, True, cap.stats)

    trailers = [("Pf-Agent", agent.label())] if agent.kind else []
    if rewritten:
        trailers.append((effects_mod.REWRITE_TRAILER, req.rewrite_effects))
    trailers.extend(req.trailers)
    message = img.format_message(req.message or f"snapshot of {world.name}", trailers)
    sig = config.signature(git)
    commit = git.create_commit(None, sig, sig, message, tree, [parent.id] if parent else [])
    refs.update_branch(git, branch, str(commit), tip, f"pf snapshot: {message.splitlines()[0]}")
    _follow(git, branch, req.switch)
    world.done(cap)
    maintenance.auto_gc(git)
    return SnapshotResult(img.read_image(git, str(commit)), branch, False, cap.stats)


def _follow(git, branch: str, switch: bool) -> None:
    """Make ``branch`` current when asked, or when there is no current image to keep: a
    snapshot onto another branch (a fork, a mount's branch) must not move a later bare merge."""
    current = refs.current_branch(git)
    if switch or current is None or (current != branch and refs.branch_tip(git, current) is None):
        refs.set_head(git, branch)


def _write_tree(repo, req: SnapshotRequest, world: WorldSource, parent) -> tuple[Capture, str, img.Agent, bool]:
    """Capture the world and write every layer; the new image tree (no commit, no ref), and
    whether the effects ledger is a declared rewrite of the parent's."""
    git = repo.git
    cap = world.capture(repo, parent)
    edit = img.TreeEdit(git, parent.tree if parent else None)
    edit.put_tree(img.WORLD_FS, cap.tree)
    edit.put_file(img.WORLD_ATTRS, attrs_mod.encode(cap.attrs))
    messages = _layer(req.messages, parent, img.TRACE_MESSAGES, trace.decode, repo)
    if req.effects is not None:
        ledger = effects_mod.chain(req.effects, "--effects")
        rewritten = _check_effects(ledger, parent, req.rewrite_effects, repo)
    else:
        ledger, rewritten = _layer(None, parent, img.EFFECTS_LEDGER, effects_mod.decode, repo), False
    env = redact(req.env, set(req.no_redact)) if req.env is not None else \
        _layer(None, parent, img.WORLD_ENV, Env.decode, repo, default=Env())
    edit.put_file(img.TRACE_MESSAGES, trace.encode(messages))
    edit.put_file(img.EFFECTS_LEDGER, effects_mod.encode(ledger))
    edit.put_file(img.WORLD_ENV, env.encode())

    layers = dict(parent.manifest.get("layers", {})) if parent else {}
    layers.update(_layer_summary(cap.stats, messages, ledger, env))
    for extra in req.layers:
        layers[extra.name] = extra.write(repo, edit, parent)
    agent, label = _identity(req, parent)
    edit.put_file(img.MANIFEST, canonjson.encode(img.make_manifest(agent, label, layers)))
    return cap, edit.write(), agent, rewritten


def _check_effects(ledger: list[dict], parent, rewrite: str | None, repo) -> bool:
    """Refuse a given ledger that repeats an irreversible effect, or that does not extend the
    parent's without a declared rewrite; True when it is such a rewrite."""
    repeats = effects_mod.repeated_irreversible(ledger)
    if repeats:
        key, first, again = repeats[0]
        raise UsageError(f"irreversible effect {key} is recorded twice (entries {first} and {again}); "
                         f"an irreversible effect happens once", param="effects")
    base = _layer(None, parent, img.EFFECTS_LEDGER, effects_mod.decode, repo)
    problem = effects_mod.extension_problem(base, ledger)
    if problem is None:
        return False
    if rewrite is None:
        raise UsageError(f"not an extension of the parent image's ledger: {problem} "
                         f"(the ledger only grows; --rewrite-effects records a deliberate rewrite)", param="effects")
    return True


def _identity(req: SnapshotRequest, parent) -> tuple[img.Agent, str]:
    """Agent and label: as given, else inherited from the parent image."""
    old = parent.manifest if parent else {}
    agent = req.agent if req.agent.kind else img.Agent(**old.get("agent", {})) if old else req.agent
    label = req.label if req.label is not None else old.get("label", "")
    return agent, label


def _layer(given, parent, path: bytes, decode, repo, default=None):
    if given is not None:
        return given
    if parent is not None:
        data = img.read_file(repo.git, parent.tree, path)
        if data is not None:
            return decode(data)
    return default if default is not None else []
