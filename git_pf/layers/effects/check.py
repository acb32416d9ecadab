"""fsck's checks of an image's effects ledger (``Layer.fsck``): a sound hash chain, no
irreversible effect recorded twice (reported where the repeat first appears), and a ledger
that extends its first parent's (docs/format.md §9) unless the image carries
``Pf-Rewrite-Effects``. Run once the ledger parses. Reads; repairs nothing.
"""
from __future__ import annotations

from ...image import manifest as img
from ...core.errors import PfError
from . import ledger as effects


def problems(git, store, image: img.ImageInfo, out: list[str], seen: set[str], remote_has) -> None:
    """Append one line per problem of ``image``'s ledger to ``out``."""
    entries = effects.decode(img.read_file(git, image.tree, img.EFFECTS_LEDGER) or b"")
    out += [f"image {image.short}: effects {problem}" for problem in effects.verify(entries)]
    try:
        parent = img.read_image(git, image.parents[0]) if image.parents else None
        base = effects.decode(img.read_file(git, parent.tree, img.EFFECTS_LEDGER) or b"") if parent else []
    except PfError:
        parent, base = None, []  # the parent's own check reports it
    inherited = {(k, a) for k, _, a in effects.repeated_irreversible(base)}
    for key, first, again in effects.repeated_irreversible(entries):
        if (key, again) not in inherited:
            out.append(f"image {image.short}: effects: irreversible effect {key} recorded twice "
                       f"(entries {first} and {again})")
    problem = effects.extension_problem(base, entries) if parent else None
    if problem and not image.trailer(effects.REWRITE_TRAILER):
        out.append(f"image {image.short}: effects ledger does not extend its first parent "
                   f"{parent.short}'s: {problem} (and no {effects.REWRITE_TRAILER} trailer)")
