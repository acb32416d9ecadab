"""Checking an image's tape (``trace/tape/``) as untrusted data, for show and fsck.

``tape_problems`` is the tape's reader in the registry (``Layer.tree_checks``, used by
``layercheck.check``: show, a fast-forward merge): one line per problem, each malformed entry on
its own (a name that is neither an entry's ``<seq:08d>-<16 hex>.json`` nor a chunk's, a blob that
is missing, too large, not a JSON object or whose name does not carry its hash, a chunk whose
frame or content is not what its name says, a v2 entry that ``exchange.parse_entry`` refuses).
``problems`` is the layer's fsck check (``Layer.fsck``): every bad entry, and two exchanges with
one step number. An entry or chunk found sound is remembered by name and blob id (and, for a
chunk compressed against its tape's first, whether that one is there), so the step images of a
run, which share them, are each read once. Reads blobs; writes nothing.
"""
from __future__ import annotations

from ...image import manifest as img
from ...core import limits
from ...core.errors import DataError, PfError
from ...image.tree import MODE_TREE, lookup, read_tree
from . import exchange, tape, tapechunk

_SOUND_MAX = 1 << 17  # entries and chunks remembered as sound: (name, blob id, size limit) -> entry name -> step
_sound: dict[tuple, dict[bytes, int | None]] = {}
_FIRST_MAX = 8  # tapes' first column chunks remembered: (name, blob id) -> the Base it gives, or None
_first: dict[tuple[bytes, bytes], object] = {}


def _items(git, tree_hex: str, out: dict[bytes, str]) -> list[tuple[bytes, bytes]]:
    """``(name, raw oid)`` of each well-named loose entry or chunk; a problem of the tape itself goes to ``out``."""
    found = lookup(git, bytes.fromhex(tree_hex), tape.PATH)
    if found is None:
        return []
    if found[0] != MODE_TREE:
        out[tape.PATH] = f"{tape.PATH.decode()}: not a directory"
        return []
    good = []
    for name, mode, oid in read_tree(git, found[1]):
        try:
            good.append((tape.check_name(name, mode), oid))
        except DataError as e:
            out[tape.PATH + b"/" + name] = e.message
    return good


def _steps(git, tree_hex: str, out: dict[bytes, str]) -> list[int]:
    """The step of each sound v2 exchange of the tape (an entry two chunks hold, once); each bad
    entry's or chunk's line goes to ``out``."""
    limit, steps, bases = limits.active().max_json_line, {}, None
    files = _items(git, tree_hex, out)
    for name, oid in files:
        key, base = (name, oid, limit), None
        ref = tapechunk.base_of(name) if tapechunk.span(name) else None
        if ref is not None:  # sound only with its tape's first chunk beside it
            bases = _bases(git, files) if bases is None else bases
            base = bases.get(ref)
            key += (base is not None,)
        sound, bad = _sound.get(key), {}
        if sound is None:
            sound = _judge(git, name, oid, bad, base)
            out.update(bad)
        if not bad:
            if len(_sound) >= _SOUND_MAX:
                _sound.clear()
            _sound[key] = sound
        steps.update(sound)
    return [s for s in steps.values() if s is not None]


def _bases(git, files: list[tuple[bytes, bytes]]) -> dict:
    """``tape.bases`` of a tape's files, each first chunk opened once while it is remembered."""
    found = {}
    for name, oid in files:
        if name.startswith(b"00000000+") and name.endswith(b".col.zst"):
            if (name, oid) not in _first:
                if len(_first) >= _FIRST_MAX:
                    _first.clear()
                _first[(name, oid)] = next(iter(tape.bases(git, [(name, oid)]).values()), None)
            base = _first[(name, oid)]
            if base is not None:
                found[base.digest] = base
    return found


def _judge(git, name: bytes, oid: bytes, out: dict[bytes, str], base=None) -> dict[bytes, int | None]:
    """Entry name -> the step of each sound entry a loose entry or chunk holds (None: not a v2
    exchange); each bad one's line goes to ``out``. ``base``: its tape's, for a chunk compressed against it."""
    try:
        loaded = tape.load(git, name, oid, base)
    except PfError as e:  # DataError, MissingObject
        out[tape.PATH + b"/" + name] = e.message
        return {}
    sound = {}
    for member, data, where in loaded:
        try:
            entry = tape.parse(data, where)
        except PfError as e:
            out[tape.PATH + b"/" + member] = e.message
            continue
        sound[member] = entry["step"] if exchange.is_v2(entry) and entry["kind"] == "exchange" else None
    return sound


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
