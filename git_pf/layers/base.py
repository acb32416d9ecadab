"""The layer protocol: what one layer of an image offers every operation.

Each layer package declares its layers (``LAYERS``, ``Layer`` subclasses; the world
package declares ``world`` and ``env``) and the registry (``registry.layers()``) lists
them in merge order. Snapshot, checkout, diff, show, merge, fsck and the transport loop
over the registry and call these methods; none of them names a layer. Every method has
a default fitting a layer without that part, so a layer overrides only what it has.
Code a method needs is imported inside its body, so reading the registry imports no
torch and no layer module but the packages' ``__init__``.
"""
from __future__ import annotations

import importlib
import os
from contextlib import contextmanager
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any, Iterable, Mapping


def load(spec: str) -> Any:
    """The attribute a ``"module:attribute"`` string names (``attribute`` may be dotted);
    a callable given instead is returned as it is."""
    if callable(spec):
        return spec
    module, _, attr = spec.partition(":")
    found = importlib.import_module(module)
    for part in attr.split("."):
        found = getattr(found, part)
    return found


class DiffPart:
    """A base for a layer's diff (a dataclass): ``to_json()`` is its fields, and it is
    ``empty`` when every field is (a layer overrides what its fields do not say)."""

    def to_json(self) -> dict:
        return asdict(self)

    @property
    def empty(self) -> bool:
        return not any(getattr(self, f.name) for f in fields(self))


@contextmanager
def naming(image):
    """A DataError raised inside names ``image``."""
    from ..core.errors import DataError

    try:
        yield
    except DataError as e:
        raise DataError(f"image {image.short}: {e.message}", e.code) from None


def covered(path: bytes, paths: Iterable[bytes]) -> bool:
    """Whether ``path`` is one of ``paths`` or lies under one of them."""
    return any(path == p or path.startswith(p + b"/") for p in paths)


def write_own(write, repo, image, tmp, out, side: bytes, alone: bool, name: str) -> list[bytes]:
    """Run a layer's own checkout writer ``write(repo, image, dest)`` into the checkout
    directory itself when the layer is ``alone``, else into ``<side>/<name>/``; the paths written."""
    target = b"" if alone else os.path.join(side, name.encode())
    out.mkdirs(target)
    write(repo, image, tmp / os.fsdecode(target))
    root = os.fsencode(tmp)
    return [os.path.relpath(os.path.join(base, n), root) for base, _, names in os.walk(os.path.join(root, target))
            for n in names]


def generic_report_line(result) -> str:
    """The merge report's text for a ``LayerResult`` no layer words itself: how it resolved."""
    rep = result.report
    how = rep.get("resolution", "")
    if not how:
        return ", ".join(f"{k} {v}" for k, v in rep.items() if isinstance(v, (str, int, float)) and not isinstance(v, bool))
    return {"unchanged": "unchanged", "same": "both sides changed it alike", "ours": "only ours changed it",
            "theirs": "taken from theirs"}.get(how, how)


class Layer:
    """One layer as snapshot, checkout, diff, show, merge, fsck and the transport see it.

    Declared by class attributes; behaviour by the methods below, each with a default."""

    name: str = ""  # as the CLI names it: --layers, --prefer, Pf-Merge trailers
    claims: tuple[bytes, ...] = ()  # image-tree paths (files or trees) the layer owns
    files: tuple[bytes, ...] = ()  # what checkout writes as they are (a tree: its files)
    parsers: Mapping[bytes, str] = {}  # layer file -> "module:function" reader (DataError if malformed)
    tree_checks: Mapping[bytes, str] = {}  # layer tree -> "module:function"(git, image tree) -> {path: line}
    merger: str = ""  # "module:Class" implementing git_pf.merge.layer.LayerMerger, imported when merging
    needs_extra: bool = False  # its code needs the model extra (torch): a merge falls back without it
    summary_key: str | None = None  # manifest "layers" key when not the layer's name ...
    summary_fields: tuple[str, ...] | None = None  # ... and the fields of it the layer owns
    diff_paths: tuple[bytes, ...] = ()  # the paths its diff reads: other changes are "other"
    diff_rank: int = 0  # where diff lists it (lowest first)
    counts: Mapping[str, tuple[str, ...]] = {}  # manifest key -> its fields that are counts (checked on read)
    keywords: tuple[str, ...] = ()  # SnapshotRequest keywords that carry its input (``input_from``)
    root: bool = False  # checkout writes it into the directory itself; other layers go beside it

    def __repr__(self) -> str:
        return f"<layer {self.name}>"

    @property
    def manifest_key(self) -> str:
        return self.summary_key or self.name

    # -- input: what a snapshot writes or inherits -------------------------------------------
    def input_from(self, keywords: Mapping[str, Any]) -> Any:
        """This layer's input built from the request keywords it takes (``keywords``); None: none given."""
        return None

    def input_from_flags(self, flags: Mapping[str, Any]) -> Any:
        """This layer's snapshot input as ``Repo.snapshot`` takes it by the layer's name, read from
        ``git pf snapshot``'s flags (``flags``: each option's parameter name -> its value); None: none given."""
        return None

    def input(self, snap) -> dict[str, dict]:
        """Write what ``snap`` (a ``SnapshotWrite``) gives this layer, else what it inherits;
        ``{manifest key: summary}``. Default: the ``LayerInput``s named as the layer, else the
        parent's files and summary kept."""
        return snap.write_given(self.name)

    def source(self, repo, fs_root: Path, ignore: tuple[str, ...]):
        """The root layer's default ``WorldSource`` for a sandbox directory; None: the layer has none."""
        return None

    # -- read -----------------------------------------------------------------------------------
    def parse(self, path: bytes, data: bytes) -> Any:
        """The layer file at ``path`` parsed by its reader (a DataError when malformed)."""
        return load(self.parsers[path])(data)

    def read(self, git, image, path: bytes, default: Any = None) -> Any:
        """The parsed layer file at ``path`` of ``image`` (``default`` when absent); a DataError names the image."""
        from ..image.manifest import read_file

        data = read_file(git, image.tree, path)
        with naming(image):
            return default if data is None else self.parse(path, data)

    # -- checkout -------------------------------------------------------------------------------
    def checkout_plan(self, git, image) -> Any:
        """Everything checked before anything is written (a malformed file: DataError); what
        ``checkout`` is then given. Default: each of ``files`` parsed, and (path, bytes) of
        each one that is a file (a tree there is absent, as its reader has it)."""
        from ..image.tree import MODE_TREE, lookup, read_blob

        for path in self.files:
            if path in self.parsers:
                self.read(git, image, path)
        out = []
        with naming(image):  # the object may be missing on a remote
            for path in self.files:
                found = lookup(git, bytes.fromhex(image.tree), path)
                if found is not None and found[0] != MODE_TREE:
                    out.append((path, read_blob(git, found[1])))
        return out

    def holds(self, plan: Any, name: bytes) -> bool:
        """Whether the root layer's ``plan`` writes ``name`` at the top of the directory."""
        return False

    def checkout(self, repo, image, plan: Any, tmp: Path, out, side: bytes, alone: bool) -> tuple[Any, list[bytes]]:
        """Write the layer into the checkout directory ``tmp`` (``out``: a ``safepath.SafeDir``
        on it), its files under ``side``; (stats or None, the paths written, relative to ``tmp``).
        Default: ``plan``'s files as they are."""
        written = []
        for path, data in plan:
            out.write_bytes(os.path.join(side, path), data)
            written.append(os.path.join(side, path))
        return None, written

    def empty_stats(self) -> Any:
        """The root layer's checkout stats when it is not checked out (files, bytes, pointers: 0)."""
        return None

    # -- diff -----------------------------------------------------------------------------------
    def diff(self, git, a, b) -> Any:
        """This layer's part of ``git pf diff`` (``to_json()``, ``lines(stat, patch)``, ``empty``); None: none."""
        return None

    def patches(self, git, store, a, b) -> list[tuple[bytes, bytes]] | None:
        """(path, unified diff) of each changed file, as ``git diff -p`` prints it; None: none."""
        return None

    # -- merge ----------------------------------------------------------------------------------
    def make_merger(self):
        """This layer's ``LayerMerger``; without the extra it needs, the by-side default."""
        from ..merge.plugins import merger_for

        return merger_for(self.name) if self.needs_extra else load(self.merger)()

    def merge_bases(self, git, git_dir, ours: str, theirs: str) -> list[str] | None:
        """Every merge base of two images, best first, when this layer finds them; None: it does not."""
        return None

    def merge_options(self, req) -> dict:
        """The merge options this layer reads from a ``MergeRequest`` (``MergeContext.options``)."""
        return {}

    def merge_start(self, ctx):
        """Phase one of a two-phase merge, started before the other layers merge (git's world
        merge runs while they do); the merger to finish it, or None to merge in one step."""
        return None

    def take_side(self, ctx, side: str):
        """A ``LayerResult`` refusing ``--prefer LAYER=SIDE``, or None to take the side whole."""
        return None

    def side_taken(self, ctx, parsed: dict) -> None:
        """Note in ``ctx`` what a side taken whole holds (``parsed``: its layer files, parsed)."""

    def merged_summaries(self, git, ours_tree: str, changes: dict) -> dict[str, dict]:
        """Manifest entries of this layer's parts recomputed after a merge applied ``changes``."""
        return {}

    def report_line(self, result) -> str | None:
        """The merge report's text for this layer's ``LayerResult``; None: the generic one."""
        return None

    # -- resolution by hand (``merge --checkout DIR``, ``--continue DIR``) -------------------------
    by_hand: bool = False  # a conflict in this layer can be written out, edited and captured back

    def hand_checkout(self, repo, result, layer_result, dest: Path) -> dict:
        """Write the conflicted layer into ``dest``; what the merge state keeps of it."""
        return {}

    def hand_unresolved(self, dest: Path, state: dict) -> list[str]:
        """The paths of ``dest`` still unresolved."""
        return []

    def hand_captured(self, repo, dest: Path):
        """The layer's ``LayerResult`` as resolved in ``dest``."""
        raise NotImplementedError(self.name)

    def hand_done(self, dest: Path) -> None:
        """Remove what ``hand_checkout`` added beside the layer's files."""

    # -- summary (show) -------------------------------------------------------------------------
    def summary(self, repo, image) -> Any:
        """What ``git pf show`` adds for the layer (``to_json()``, ``lines()``), or None."""
        return None

    # -- fsck and tree checks -------------------------------------------------------------------
    def fsck(self, git, store, image, out: list[str], seen: set[str], remote_has) -> None:
        """Append one problem line each to ``out``; run once the layer's files parse."""

    def object_refs(self, git, tree_hex: str) -> Iterable[str]:
        """Side-store objects the layer names without pointer blobs (they must exist, and travel)."""
        return ()

    def tree_problems(self, git, tree_hex: str) -> dict[bytes, str]:
        """Each bad entry of the trees the layer registers (``tree_checks``): path -> one line."""
        out: dict[bytes, str] = {}
        for spec in self.tree_checks.values():
            out.update(load(spec)(git, tree_hex))
        return out

    def present(self, git, image) -> bool:
        """Whether ``image`` (or None) holds any of the layer's paths."""
        from ..image.tree import lookup

        return image is not None and any(lookup(git, bytes.fromhex(image.tree), p) is not None for p in self.claims)
