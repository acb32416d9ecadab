"""Whole-content hashes this store computed itself: ``<store>/hashed/<chunk index oid>``.

When ``LargeContent.put_large`` chunks a large file it hashes the whole content
too (the pointer's ``oid``). That hash is written here, keyed by the chunk
index's oid, so a transport that sends the file's chunks as one object named
by the sha256 of their bytes (the lfs adapter) needs no second pass over them.
Only ``put_large`` writes a record, from bytes it hashed; nothing fetched ever
does, so a pointer from another remote never names bytes through this file.

A record is three lines (docs/transport.md, "The lfs adapter"):
``pf-hashed 1``, ``<whole oid> <size>``, and the sha256 of
``pf-hashed 1\\n<index oid>\\n<whole oid> <size>\\n``. A record that is torn,
edited, of another version or filed under another index does not match its
last line and is ignored (the caller hashes the bytes itself, as without one).
Records are written atomically and not synced: a crash loses at most a record.
Touches only files under ``hashed/``.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .frames import OID_RE

DIR = "hashed"
_MAGIC = "pf-hashed 1"
_MAX = 256  # bytes a record may take: more is not a record


def _check(index_oid: str, whole: str, size: int) -> str:
    return hashlib.sha256(f"{_MAGIC}\n{index_oid}\n{whole} {size}\n".encode()).hexdigest()


def encode(index_oid: str, whole: str, size: int) -> bytes:
    return f"{_MAGIC}\n{whole} {size}\n{_check(index_oid, whole, size)}\n".encode()


def decode(index_oid: str, data: bytes) -> tuple[str, int] | None:
    """``(whole oid, size)`` of a record filed under ``index_oid``; None unless it is one,
    unchanged, of this version."""
    try:
        magic, fields, check, end = data.decode("ascii").split("\n")
        whole, size_text = fields.split(" ")
    except (UnicodeDecodeError, ValueError):
        return None
    if magic != _MAGIC or end or not OID_RE.match(whole) or not size_text.isdigit() or \
            size_text != str(int(size_text)) or check != _check(index_oid, whole, int(size_text)):
        return None
    return whole, int(size_text)


def write(root: Path, index_oid: str, whole: str, size: int) -> None:
    """Record that the chunks listed by ``index_oid`` are ``size`` bytes hashing to ``whole``
    (best effort: a store that cannot take the file just has no record)."""
    directory = Path(root) / DIR
    path = directory / index_oid
    data = encode(index_oid, whole, size)
    try:
        if path.read_bytes() == data:
            return
    except OSError:
        pass
    tmp = directory / f".{index_oid}.{os.getpid()}.tmp"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def read(root: Path, index_oids) -> dict[str, tuple[str, int]]:
    """``{index oid: (whole oid, size)}`` for those of ``index_oids`` with a valid record."""
    directory = Path(root) / DIR
    try:
        present = set(os.listdir(directory))
    except OSError:
        return {}
    out = {}
    for oid in index_oids:
        if oid not in present or not OID_RE.match(oid):
            continue
        try:
            with open(directory / oid, "rb") as f:
                data = f.read(_MAX + 1)
        except OSError:
            continue
        found = decode(oid, data) if len(data) <= _MAX else None
        if found is not None:
            out[oid] = found
    return out
