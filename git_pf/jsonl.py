"""Reading JSONL files handed to us by users, with line-numbered errors.

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


def read(path: Path, flag: str) -> list[dict]:
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputFormatError(f"{flag}: no such file '{path}'") from None
    except IsADirectoryError:
        raise InputFormatError(f"{flag}: '{path}' is a directory") from None
    except PermissionError:
        raise InputFormatError(f"{flag}: cannot read '{path}': permission denied") from None
    return parse(data, str(path))
