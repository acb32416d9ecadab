"""Finding a cached prefix: the image whose KV cache holds the longest prefix of a context.

An agent about to run a context (a fork's next turn, a rollout from a shared
prompt) asks which image already holds the cache for the most of its first
tokens; ``restore(image, tokens=context)`` then reads just those pages, and
the agent runs the rest. The images looked at are those the repository's
refs point at (branches, tags, remote-tracking branches, ``HEAD``; not their
history), and only caches captured for the same model fingerprint and
adapter count. Reads page tables (``cache/pages.json``) only; writes nothing.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...image import refs
from ...core.errors import PfError
from ...core.sequences import common_prefix
from .paging import fingerprint, token_list
from .table import read


@dataclass(frozen=True)
class Match:
    """The image whose cache holds the longest prefix of a context, and that prefix's length."""

    image: object  # an ImageInfo, or None when no image holds any of it
    tokens: int  # leading tokens of the context the image's cache holds
    ref: str | None  # a ref that points at the image (the first by name)


def longest_prefix(tokens, *, repo=None, model, adapter: str | None = None) -> Match:
    """The image the repository's refs point at whose cache holds the longest prefix of
    ``tokens`` for ``model`` (a fingerprint string or the module) and ``adapter``; ties go
    to the first ref by name. Images whose cache cannot be read are passed over."""
    from ...image.manifest import read_image
    from ...repo import Repo

    if repo is None or isinstance(repo, (str, bytes)) or hasattr(repo, "__fspath__"):
        repo = Repo.open(repo or ".")
    want, context = fingerprint(model), token_list(tokens)
    best, seen = Match(None, 0, None), set()
    for name, oid in sorted(refs.list_refs(repo.git, refs.ROOT).items()):
        if not refs.is_image_ref(name) or oid in seen:
            continue
        seen.add(oid)
        try:
            image = read_image(repo.git, oid)
            table = read(repo, image.tree)
        except (PfError, KeyError, ValueError):
            continue  # not an image, or a damaged one: fsck reports it
        if table is None or table.model != want or table.adapter != adapter:
            continue
        n = common_prefix(table.tokens, context)
        if n > best.tokens:
            best = Match(image, n, refs.ROOT + name)
    return best
