"""Reading JSONL (and single JSON) files handed to us by users, with line-numbered errors.

Each non-blank line must be one JSON object. Bytes that are not valid UTF-8
are kept through ``surrogateescape`` (canonical JSON then writes them as
escapes), so no text is lost. Pure parsing; knows no schema.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import InputFormatError


def parse(data: bytes, where: str) -> list[dict]:
    out = []
    for lineno, raw in enumerate(data.split(b"\n"), 1):
        if not raw.strip():
            continue
        text = raw.decode("utf-8", "surrogateescape")
        try:
            obj = json.loads(text)
        except ValueError as e:
            raise InputFormatError(f"{where}:{lineno}: not valid JSON ({e.args[0].split(':')[0]})") from None
        if not isinstance(obj, dict):
            raise InputFormatError(f"{where}:{lineno}: each line must be a JSON object")
        out.append(obj)
    return out


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
