"""Checking an image's tape (``trace/tape/``) as untrusted data, for show and fsck.

``tape_problems`` is the tape's reader in the registry (``Layer.tree_checks``, used by
``layercheck.check``: show, a fast-forward merge): one line per problem, each malformed entry on
its own (a name that is not ``<seq:08d>-<16 hex>.json``, a blob that is missing, too large, not a
JSON object or whose name does not carry its hash, a v2 entry that ``exchange.parse_entry``
refuses). ``problems`` is the layer's fsck check (``Layer.fsck``): every bad entry, and two
exchanges with one step number. An entry found sound is remembered by name and blob id, so the
step images of a run, which share their entries, are each read once. Reads blobs; writes nothing.
"""
from __future__ import annotations

from ... import image as img, limits
from ...errors import PfError
from ...gittree import MODE_FILE, MODE_TREE, lookup, read_tree
from . import exchange, tape

_SOUND_MAX = 1 << 17  # entries remembered as sound: (name, blob id, size limit) -> its exchange's step
_sound: dict[tuple[bytes, bytes, int], int | None] = {}


def _entries(git, tree_hex: str, out: dict[bytes, str]) -> list[tuple[bytes, bytes]]:
    """``(name, raw oid)`` of each well-named entry; a problem of the tape itself goes to ``out``."""
    found = lookup(git, bytes.fromhex(tree_hex), tape.PATH)
    if found is None:
        return []
    if found[0] != MODE_TREE:
        out[tape.PATH] = f"{tape.PATH.decode()}: not a directory"
        return []
    good = []
    for name, mode, oid in read_tree(git, found[1]):
        if mode != MODE_FILE or not tape._ENTRY_NAME.match(name):
            out[tape.PATH + b"/" + name] = (f"{tape._where(name)}: not a tape entry "
                                            "(a file named <seq:08d>-<16 hex>.json)")
        else:
            good.append((name, oid))
    return good


def _steps(git, tree_hex: str, out: dict[bytes, str]) -> list[int]:
    """The step of each sound v2 exchange of the tape; each bad entry's line goes to ``out``."""
    limit, steps = limits.active().max_json_line, []
    for name, oid in _entries(git, tree_hex, out):
        key = (name, oid, limit)
        if key not in _sound:
            try:
                entry = tape.read_entry(git, name, oid)
            except PfError as e:  # DataError, MissingObject
                out[tape.PATH + b"/" + name] = e.message
                continue
            if len(_sound) >= _SOUND_MAX:
                _sound.clear()
            _sound[key] = entry["step"] if exchange.is_v2(entry) and entry["kind"] == "exchange" else None
        if _sound[key] is not None:
            steps.append(_sound[key])
    return steps


def tape_problems(git, tree_hex: str) -> dict[bytes, str]:
    """Each problem of the tape of an image tree: entry path (or the tape's) -> one line naming it."""
    out: dict[bytes, str] = {}
    _steps(git, tree_hex, out)
    return out


def problems(git, store, image: img.ImageInfo, out: list[str], seen: set[str], remote_has) -> None:
    """fsck (``Layer.fsck``): a line for each bad entry of ``image``'s tape, and for each step
    number two of its exchanges share."""
    bad: dict[bytes, str] = {}
    steps = sorted(_steps(git, image.tree, bad))
    out += [f"image {image.short}: {line}" for line in bad.values()]
    for step in sorted({a for a, b in zip(steps, steps[1:]) if a == b}):
        out.append(f"image {image.short}: {tape.PATH.decode()}: step {step} is recorded twice")
