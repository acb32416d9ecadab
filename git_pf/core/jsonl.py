"""Reading JSONL (and single JSON) files, with line-numbered errors.

Each non-blank line must be one JSON object. ``parse`` serves both a file a
user handed us (the default: ``InputFormatError``, exit 2) and a file read
from an image (``error=DataError``, exit 3). Bytes that are not valid UTF-8
are kept through ``surrogateescape`` (canonical JSON then writes them as
escapes), so no text is lost. Pure parsing; knows no schema.
"""
from __future__ import annotations

import json
from pathlib import Path

from . import canonjson, limits
from .errors import DataError, InputFormatError, PfError


def check_line_lengths(data: bytes, where: str) -> None:
    """DataError (one line naming ``where`` and the line) when a line of ``data`` is longer
    than ``pf.maxJsonLine``: refused before it is parsed, whoever reads it (the limit is
    there for image data; no hand-written file comes near it) (docs/security.md, "Bounded reads")."""
    limit = limits.active().max_json_line
    if len(data) <= limit:
        return
    start, lineno = 0, 1
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end
        if end - start > limit:
            raise DataError(f"{where}:{lineno}: a line of {end - start} bytes, over pf.maxJsonLine ({limit})")
        start, lineno = end + 1, lineno + 1


def parse(data: bytes, where: str, error: type[PfError] = InputFormatError) -> list[dict]:
    """The objects of JSONL ``data``; a malformed line raises ``error`` naming ``where:LINE``."""
    check_line_lengths(data, where)
    out = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        text = raw.decode("utf-8", "surrogateescape")
        obj = _loads(text, f"{where}:{lineno}", error)
        if not isinstance(obj, dict):
            raise error(f"{where}:{lineno}: each line must be a JSON object")
        out.append(obj)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not JSON")


def _loads(text: str | bytes, where: str, error: type[PfError]):
    """One JSON value; NaN / Infinity (not JSON) and nesting too deep to parse raise ``error``."""
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{where}: nested too deeply") from None
    except ValueError as e:  # UnicodeDecodeError included
        raise error(f"{where}: not valid JSON ({str(e).split(':')[0]})") from None


def loads(data: bytes, where: str):
    """One JSON document read from an image (within ``pf.maxJsonLine``, no NaN / Infinity);
    any problem is a ``DataError`` naming ``where``."""
    try:
        canonjson.check_length(data)
    except DataError as e:
        raise DataError(f"{where}: {e.message}") from None
    return _loads(data, where, DataError)


def read_bytes(path: Path, flag: str) -> bytes:
    """The bytes of a file a user named with ``flag``; one clear line when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise InputFormatError(f"{flag}: no such file '{path}'") from None
    except IsADirectoryError:
        raise InputFormatError(f"{flag}: '{path}' is a directory") from None
    except PermissionError:
        raise InputFormatError(f"{flag}: cannot read '{path}': permission denied") from None
    except OSError as e:
        raise InputFormatError(f"{flag}: cannot read '{path}': {e.strerror}") from None


def read(path: Path, flag: str) -> list[dict]:
    return parse(read_bytes(path, flag), str(path))


def read_json(path: Path, flag: str):
    """One JSON document from a file a user named with ``flag`` (any JSON value)."""
    data = read_bytes(path, flag)
    try:
        return json.loads(data)
    except ValueError as e:  # UnicodeDecodeError included
        raise InputFormatError(f"{flag}: '{path}' is not valid JSON ({e})") from None
