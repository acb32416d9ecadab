"""Escaping of sandbox file names that git trees may not hold.

git refuses a tree entry named ``.git`` (any case). Such a name is stored as
``.pf-esc-`` + name; a name that already starts with ``.pf-esc-`` is escaped
the same way, so the mapping is a bijection (docs/format.md). ``tree_path`` /
``real_path`` apply it to each component of a slash-separated path. Pure
functions, kept with the path checks (``safepath``), which name no layer.
"""
from __future__ import annotations

from ...image.safepath import ESCAPE_PREFIX, from_tree, real_path, to_tree, tree_path

__all__ = ["ESCAPE_PREFIX", "from_tree", "real_path", "to_tree", "tree_path"]
