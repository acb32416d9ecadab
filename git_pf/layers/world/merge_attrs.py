"""Key-wise three-way merge of ``world/fs.attrs.jsonl``.

Every entry is split into keys ``(path, "dir")``, ``(path, "mode")`` and
``(path, "xattr", name)``; each key merges three-way (both sides changing one
key differently is a conflict, as is a change on one side where the other
removed the key). Pointer flags are not merged: the world merger derives them
from the merged blobs. The result is then made consistent with the merged
tree: entries of vanished files go, a bare directory entry goes once the
directory holds files, and a recorded mode whose exec bit disagrees with the
merged tree is a conflict. Pure data handling; the caller reads trees.
"""
from __future__ import annotations

import os
from typing import Callable

from ...image.tree import MODE_EXEC, MODE_FILE, MODE_TREE
from .attrs import PathAttrs
from ...merge.tree3 import merge_mapping, virtual_mapping


def flatten(entries: dict[bytes, PathAttrs]) -> dict[tuple, object]:
    out: dict[tuple, object] = {}
    for path, e in entries.items():
        if e.is_dir:
            out[(path, "dir", "")] = True
        if e.mode is not None:
            out[(path, "mode", "")] = e.mode
        for name, value in e.xattrs.items():
            out[(path, "xattr", name)] = value
    return out


def unflatten(mapping: dict[tuple, object], pointers: set[bytes]) -> dict[bytes, PathAttrs]:
    out: dict[bytes, PathAttrs] = {}
    for (path, field, name), value in mapping.items():
        e = out.setdefault(path, PathAttrs(path))
        if field == "dir":
            e.is_dir = True
        elif field == "mode":
            e.mode = value
        else:
            e.xattrs[name] = value
    for path in pointers:
        out.setdefault(path, PathAttrs(path)).pointer = True
    return out


def _describe(key: tuple) -> str:
    path, field, name = key
    what = {"dir": "directory entry", "mode": "permissions"}.get(field, f"xattr {name}")
    return f"CONFLICT (attrs): {what} of '{os.fsdecode(path)}' changed differently on both sides"


def merge(bases: list[dict], ours: dict, theirs: dict, *, pointers: set[bytes], touched: set[bytes],
          mode_of: Callable[[bytes], int | None]) -> tuple[dict[bytes, PathAttrs], list[str]]:
    """Merge attrs mappings (path -> PathAttrs). ``mode_of(path)`` gives the merged tree's
    git mode at a sandbox path (None when absent); ``touched`` are the paths whose tree
    entry changed from ours. Returns (entries, conflict lines)."""
    flat_ours = flatten(ours)
    merged, conflicts = merge_mapping(virtual_mapping([flatten(b) for b in bases]), flat_ours, flatten(theirs))
    lines = [_describe(k) for k in conflicts]
    check = {k[0] for k in merged.keys() ^ flat_ours.keys()} | {k[0] for k in merged if merged[k] != flat_ours.get(k)}
    around = set(touched) | {t[:i] for t in touched for i, c in enumerate(t) if c == 0x2F}
    check |= {k[0] for k in merged if k[0] in around}
    for path in sorted(check):
        _settle(path, merged, mode_of(path), lines)
    return unflatten(merged, pointers), lines


def _settle(path: bytes, merged: dict, mode: int | None, lines: list[str]) -> None:
    keys = [k for k in merged if k[0] == path]
    is_dir = (path, "dir", "") in merged
    if mode is None:
        if not is_dir:
            for k in keys:
                del merged[k]
        return
    if mode == MODE_TREE:
        if is_dir and len(keys) == 1:
            del merged[(path, "dir", "")]  # no longer an empty directory
        return
    if is_dir:
        lines.append(f"CONFLICT (attrs): '{os.fsdecode(path)}' is a directory on one side and a file on the other")
        return
    perm = merged.get((path, "mode", ""))
    if perm is not None and mode in (MODE_FILE, MODE_EXEC) and bool(perm & 0o100) != (mode == MODE_EXEC):
        lines.append(f"CONFLICT (attrs): permissions of '{os.fsdecode(path)}' changed differently on both sides")
