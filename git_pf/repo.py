"""``git_pf.Repo``: the Python API, a thin facade over one module per operation.

Opens (or initialises) a git repository, owns its side store, and exposes
snapshot / fork / checkout / log / resolve / diff / show / refs / fsck
returning typed dataclasses. The CLI goes through this class for what it offers; the
packages it reaches past it, and why, are the cli row of docs/architecture.md. The
transport (lazy fetch, objects held as git blobs) is attached on the store's first miss.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from .core import config, limits
from .image import history, manifest as img, refs
from .core.errors import NotARepository, UsageError
from .core.gitdir import common_dir
from .store.sidestore import SideStore

if TYPE_CHECKING:  # each operation's module is imported when it is first used: a push needs none of them
    from .ops import checkout as checkout_mod, diff as diff_mod, fork as fork_mod, fsck as fsck_mod
    from .ops.snapshot import SnapshotResult


_ATTACHED = ("fetcher", "held")
_ATTACH_LOCK = threading.RLock()
# The repository the command server's spare opened before its command came (cli.server): ``open``
# takes it where opening ``path`` gives that repository (refs and config are read through it afresh).
AHEAD: pygit2.Repository | None = None


class _Unattached:
    """The store's ``fetcher`` or ``held`` until first used: then the transport's, attached."""

    __slots__ = ("_repo", "_attr")

    def __init__(self, repo: "Repo", attr: str):
        self._repo, self._attr = repo, attr

    def __call__(self, *args, **kwargs):
        return self._repo._attach_transport(self._attr)(*args, **kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") or name in _Unattached.__slots__:
            raise AttributeError(name)
        return getattr(self._repo._attach_transport(self._attr), name)


def _opens(git: pygit2.Repository, path, found: str) -> bool:
    """Whether opening ``path`` (whose git directory is ``found``) gives ``git``: the same git
    directory, bare, or with ``path`` inside the work tree whose ``.git`` directory it is (not a
    work tree whose ``.git`` file names it, nor one ``core.worktree`` names)."""
    real = os.path.realpath(found)
    if real != os.path.realpath(git.path):
        return False
    if git.workdir is None:
        return True
    work = os.path.realpath(git.workdir)
    inside = os.path.realpath(path)
    return os.path.realpath(os.path.join(work, ".git")) == real and os.path.isdir(os.path.join(work, ".git")) \
        and (inside == work or inside.startswith(work.rstrip(os.sep) + os.sep))


class Repo:
    def __init__(self, git: pygit2.Repository):
        self.git = git
        self.git_dir = Path(common_dir(git.path)).resolve()  # a linked work tree shares the images
        self.store = SideStore(self.git_dir / "pf" / "objects")
        self.store.rehash_reads = config.rehash_reads(git)
        limits.use(config.limits(git))  # bounds on reads of image data, for this process
        # Missing side-store objects come from remotes, and objects a remote brought as git blobs
        # are read where they are: the transport that does both is imported on the store's first
        # miss, not here (a command that reads only refs never loads it).
        self.store.fetcher = _Unattached(self, "fetcher")
        self.store.held = _Unattached(self, "held")

    def _attach_transport(self, attr: str):
        """The store's ``attr`` once the transport is attached (``transport.lazy.attach``, done once);
        a ``fetcher`` or ``held`` set on the store before that (the mount daemon's) is kept."""
        with _ATTACH_LOCK:
            store = self.store
            kept = {a: getattr(store, a) for a in _ATTACHED if not isinstance(getattr(store, a), _Unattached)}
            if len(kept) < len(_ATTACHED):
                from .transport.lazy import attach

                attach(self)
                for a, value in kept.items():
                    setattr(store, a, value)
            return getattr(store, attr)

    # -- opening --------------------------------------------------------
    @classmethod
    def open(cls, path: str | os.PathLike = ".") -> "Repo":
        """The repository containing ``path`` (searching upwards, as git does)."""
        try:
            found = pygit2.discover_repository(str(path))
        except pygit2.GitError:
            found = None
        if found is None:
            raise NotARepository(f"not a git repository: '{path}' (run 'git pf init')")
        if AHEAD is not None and _opens(AHEAD, path, found):
            return cls(AHEAD)
        try:  # opened from ``path``, not from ``found``: a ``.git`` file (``--separate-git-dir``)
            return cls(pygit2.Repository(str(path)))  # then gives the right work tree
        except pygit2.GitError as e:
            raise NotARepository(f"cannot open the repository: {e}") from None

    @classmethod
    def init(cls, path: str | os.PathLike = ".") -> tuple["Repo", bool]:
        """Make ``path`` a git repository when it is not one; returns (repo, created)."""
        p = Path(path)
        if p.exists() and not p.is_dir():
            raise UsageError(f"'{path}' exists and is not a directory")
        found = pygit2.discover_repository(str(p)) if p.exists() else None
        git = pygit2.Repository(str(p)) if found else None
        if git is not None and Path(git.workdir or git.path).resolve() == p.resolve():
            repo, created = cls(git), False
        else:
            p.mkdir(parents=True, exist_ok=True)
            repo, created = cls(pygit2.init_repository(str(p))), True
        (repo.git_dir / "pf" / "objects").mkdir(parents=True, exist_ok=True)
        return repo, created

    # -- images ---------------------------------------------------------
    def resolve(self, rev: str) -> img.ImageInfo:
        return img.read_image(self.git, refs.resolve(self.git, rev))

    def snapshot(self, fs_root: str | os.PathLike, *, name: str | None = None, agent: str | img.Agent | None = None,
                 trace=None, effects: list[dict] | None = None, env=None, model=None, cache=None,
                 no_redact: set[str] | frozenset[str] = frozenset(), message: str | None = None,
                 label: str | None = None, ignore: list[str] | tuple[str, ...] = (), allow_empty: bool = False,
                 rewrite_effects: bool | str = False, switch: bool = False,
                 messages: list[dict] | None = None, layers: tuple = ()) -> SnapshotResult:
        """A new image of the sandbox ``fs_root`` and the layers given, each by its name
        (``trace=TraceInput``, ``effects=[entries]``, ``env=EnvInput | Env | dict``,
        ``model=ModelInput``, ``cache=CacheInput``; docs/python-api.md); layers not given are
        carried over. ``rewrite_effects`` (True or a reason) lets ``effects`` drop or change the
        parent's entries (a ``Pf-Rewrite-Effects`` trailer). The branch (``name``) becomes the
        current one only with ``switch``, or when there is no current image. ``messages=`` and
        ``layers=`` are the first release's spelling: they still work, with a DeprecationWarning."""
        from .ops.snapshot import take
        from .ops.snapshot_inputs import request

        return take(self, request(fs_root, name=name, agent=agent, trace=trace, effects=effects, env=env,
                                  model=model, cache=cache, no_redact=no_redact, message=message, label=label,
                                  ignore=ignore, allow_empty=allow_empty, rewrite_effects=rewrite_effects,
                                  switch=switch, messages=messages, layers=layers))

    def fork(self, rev: str, n: int, prefix: str | None = None, explore: str | None = None) -> list[fork_mod.Fork]:
        from .ops import fork as fork_mod

        return fork_mod.fork(self, rev, n, prefix, explore)

    def checkout(self, rev: str, into: str | os.PathLike, layers=("world",), force: bool = False) -> checkout_mod.CheckoutResult:
        from .ops import checkout as checkout_mod

        return checkout_mod.checkout(self, rev, Path(into), layers, force)

    def log(self, rev: str | None = None, limit: int | None = None, first_parent: bool = False) -> list[img.ImageInfo]:
        start = refs.resolve(self.git, rev or "HEAD") if (rev or self.current_branch_tip()) else None
        if start is None:
            return []
        return history.log(self.git, start, limit, first_parent)

    def diff(self, a: str, b: str, patch: bool = False) -> diff_mod.ImageDiff:
        """Compare two images; ``patch=True`` adds each world file's unified diff (``.patch``)."""
        from .ops import diff as diff_mod

        return diff_mod.diff(self.git, self.resolve(a), self.resolve(b), self.store if patch else None)

    def read_layer(self, rev: str, path: str) -> bytes | None:
        """The raw bytes of one file of an image tree (e.g. ``trace/messages.jsonl``)."""
        return img.read_file(self.git, self.resolve(rev).tree, path.encode())

    # -- refs -----------------------------------------------------------
    def current_branch(self) -> str | None:
        return refs.current_branch(self.git)

    def current_branch_tip(self) -> str | None:
        branch = self.current_branch()
        return refs.branch_tip(self.git, branch) if branch else None

    def refs(self) -> list[history.RefEntry]:
        return history.list_refs(self.git)

    def create_branch(self, name: str, rev: str = "HEAD") -> img.ImageInfo:
        image = self.resolve(rev)
        if refs.branch_tip(self.git, refs.check_name(name)) is not None:
            raise UsageError(f"branch '{name}' already exists")
        refs.update_branch(self.git, name, image.id, None, f"pf branch: from {rev}")
        return image

    def delete_branch(self, name: str) -> str:
        if name == self.current_branch():
            raise UsageError(f"cannot delete branch '{name}': it is the current branch")
        return self._delete(refs.HEADS, name, "branch")

    def create_tag(self, name: str, rev: str = "HEAD") -> img.ImageInfo:
        image = self.resolve(rev)
        full = refs.TAGS + refs.check_name(name, "tag")
        if self.git.references.get(full) is not None:
            raise UsageError(f"tag '{name}' already exists")
        self.git.references.create(full, image.id)
        return image

    def delete_tag(self, name: str) -> str:
        return self._delete(refs.TAGS, name, "tag")

    def _delete(self, prefix: str, name: str, what: str) -> str:
        ref = self.git.references.get(prefix + name) if name else None
        if ref is None:
            raise UsageError(f"no such {what} '{name}'")
        target = str(ref.target)
        ref.delete()
        return target

    def switch(self, name: str) -> None:
        """Make ``name`` the current branch (it need not exist yet)."""
        refs.set_head(self.git, refs.check_name(name))

    # -- merge (docs/merge.md) -------------------------------------------
    def merge(self, theirs: str, into: str | None = None, dry_run: bool = False, prefer=None, options=None,
              accept_duplicate_effects: bool = False, no_ff: bool = False, allow_unrelated: bool = False,
              checkout: str | os.PathLike | None = None):
        """Merge image ``theirs`` into branch ``into`` (default: the current one); a ``MergeResult``."""
        from .merge import conflicts, engine

        req = engine.MergeRequest(theirs, into, dry_run, prefer or {}, dict(options or {}), accept_duplicate_effects,
                                  no_ff, allow_unrelated)
        return conflicts.merge_with_checkout(self, req, Path(checkout)) if checkout is not None else engine.merge(self, req)

    def merge_continue(self, path: str | os.PathLike):
        from .merge import conflicts

        return conflicts.continue_merge(self, Path(path))

    def merge_abort(self, path: str | os.PathLike) -> Path:
        from .merge import conflicts

        return conflicts.abort(self, Path(path))

    # -- maintenance ----------------------------------------------------
    def fsck(self) -> fsck_mod.FsckReport:
        from .ops import fsck as fsck_mod

        return fsck_mod.fsck(self.git, self.store)
