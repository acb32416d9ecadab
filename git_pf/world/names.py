"""Escaping of sandbox file names that git trees may not hold.

git refuses a tree entry named ``.git`` (any case). Such a name is stored as
``.pf-esc-`` + name; a name that already starts with ``.pf-esc-`` is escaped
the same way, so the mapping is a bijection (docs/format.md). Pure functions.
"""
from __future__ import annotations

ESCAPE_PREFIX = b".pf-esc-"


def to_tree(name: bytes) -> bytes:
    if name[:1] == b"." and (name.lower() == b".git" or name.startswith(ESCAPE_PREFIX)):
        return ESCAPE_PREFIX + name
    return name


def from_tree(name: bytes) -> bytes:
    if name.startswith(ESCAPE_PREFIX):
        return name[len(ESCAPE_PREFIX) :]
    return name
