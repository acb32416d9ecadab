"""Escaping of sandbox file names that git trees may not hold.

git refuses a tree entry named ``.git`` (any case). Such a name is stored as
``.pf-esc-`` + name; a name that already starts with ``.pf-esc-`` is escaped
the same way, so the mapping is a bijection (docs/format.md). ``tree_path`` /
``real_path`` apply it to each component of a slash-separated path. Pure
functions.
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


def tree_path(real: bytes) -> bytes:
    """A sandbox path as the world tree stores it (each component escaped)."""
    return b"/".join(to_tree(c) for c in real.split(b"/"))


def real_path(tree: bytes) -> bytes:
    """A world tree path as the sandbox names it (each component unescaped)."""
    return b"/".join(from_tree(c) for c in tree.split(b"/"))
