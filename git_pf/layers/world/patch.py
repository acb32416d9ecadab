"""The unified diff of two world trees, as ``git diff`` prints it.

Headers (``diff --git``, mode lines, ``index``, ``---``/``+++``) are written
here, with the sandbox's real names (tree-name escaping undone) quoted as git
quotes them; hunks (3 lines of context) and the binary test come from
libgit2 (``pygit2.Patch``). A file stored as a side-store pointer is compared
by content: the same oid on both sides is no change, and its content is read
(fetched if need be) only when every side is at most ``TEXT_LIMIT`` bytes;
otherwise it is shown as binary, its ``index`` line naming the pointer blobs.
A file held in git is read only when its blob (sized from its object header)
is at most ``TEXT_LIMIT`` too; a larger one is shown as binary, unread, as git
shows a file over its ``core.bigFileThreshold``.
Read-only: never writes to the repository or the side store's objects.
"""
from __future__ import annotations

import hashlib
import os

import pygit2

from ...store import pointer as pointer_fmt
from ...core.errors import DataError
from ...image.tree import MODE_EXEC, MODE_FILE, MODE_LINK, blob_size, diff_trees, iter_blob, read_blob, read_pointer
from .names import real_path

TEXT_LIMIT = 4 * 1024 * 1024  # a pointer's content is read for a text diff only up to this size
_ABBREV = 7
_ZERO = "0" * 40
_ESCAPES = {0x07: b"\\a", 0x08: b"\\b", 0x09: b"\\t", 0x0A: b"\\n", 0x0B: b"\\v", 0x0C: b"\\f",
            0x0D: b"\\r", 0x22: b'\\"', 0x5C: b"\\\\"}


class _Side:
    """One side of a changed path: its mode, git blob id, content (None until read, and
    for a blob over ``TEXT_LIMIT``) and the content's size."""

    def __init__(self, mode: int, oid: str, data: bytes | None, ptr: pointer_fmt.Pointer | None = None,
                 size: int | None = None):
        self.mode, self.oid, self.data, self.ptr = mode, oid, data, ptr
        self.size = ptr.size if ptr is not None else len(data) if data is not None else size


def quote(name: bytes) -> bytes:
    """``name`` as git writes it in a diff header (core.quotePath): C-quoted when it holds a
    control character, a quote, a backslash or a byte over 0x7f."""
    if not any(c < 0x20 or c >= 0x7F or c in (0x22, 0x5C) for c in name):
        return name
    out = b"".join(_ESCAPES.get(c) or (b"\\%03o" % c if c < 0x20 or c >= 0x7F else bytes([c])) for c in name)
    return b'"' + out + b'"'


def _side(git, store, path: bytes, entry, is_pointer: bool) -> _Side | None:
    if entry is None:
        return None
    mode, raw = entry
    if mode not in (MODE_FILE, MODE_EXEC, MODE_LINK):
        raise DataError(f"world/fs: '{os.fsdecode(path)}' is not a file or symlink (mode {mode:06o})")
    try:
        if not is_pointer or mode == MODE_LINK:
            size = blob_size(git, raw)
            return _Side(mode, raw.hex(), read_blob(git, raw) if size <= TEXT_LIMIT else None, size=size)
        return _Side(mode, raw.hex(), None, read_pointer(git, raw))
    except DataError as e:
        raise DataError(f"world/fs: '{os.fsdecode(path)}': {e.message}", e.code) from None
    except ValueError as e:
        raise DataError(f"world/fs: '{os.fsdecode(path)}': damaged pointer ({e})") from None


def _same_content(git, old: _Side, new: _Side) -> bool:
    if old.oid == new.oid:
        return True
    if old.ptr is not None and new.ptr is not None:
        return old.ptr.oid == new.ptr.oid
    if (old.ptr is None) == (new.ptr is None) or old.size != new.size:
        return False
    plain, ptr = (new, old.ptr) if old.ptr is not None else (old, new.ptr)
    digest = hashlib.sha256()
    for part in iter_blob(git, bytes.fromhex(plain.oid), plain.size) if plain.data is None else [plain.data]:
        digest.update(part)
    return digest.hexdigest() == ptr.oid


def _load(store, path: bytes, side: _Side | None) -> None:
    """Read a pointer side's content and name it by its git blob id, as git would."""
    if side is None or side.ptr is None:
        return
    try:
        side.data = b"".join(store.iter_large(side.ptr.oid, side.ptr.size, side.ptr.chunks))
    except DataError as e:
        raise DataError(f"world/fs: '{os.fsdecode(path)}': {e.message}", e.code) from None
    side.oid = str(pygit2.hash(side.data))


def _section(git, path: bytes, old: _Side | None, new: _Side | None, store) -> bytes:
    q = quote(path)
    a, b = (b"a/" + path, b"b/" + path)
    out = [b"diff --git %s %s" % (quote(a), quote(b))]
    if old is None:
        out.append(b"new file mode %o" % new.mode)
    elif new is None:
        out.append(b"deleted file mode %o" % old.mode)
    elif old.mode != new.mode:
        out += [b"old mode %o" % old.mode, b"new mode %o" % new.mode]
    if old is not None and new is not None and _same_content(git, old, new):
        return b"\n".join(out) + b"\n"
    if all(s is None or s.ptr is None or s.size <= TEXT_LIMIT for s in (old, new)):
        _load(store, path, old)
        _load(store, path, new)
    ids = (s.oid[:_ABBREV] if s else _ZERO[:_ABBREV] for s in (old, new))
    same_mode = b" %o" % old.mode if old is not None and new is not None and old.mode == new.mode else b""
    out.append(b"index %s..%s%s" % (*(i.encode() for i in ids), same_mode))
    text = b"\n".join(out) + b"\n"
    if any(s is not None and s.data is None for s in (old, new)):  # a large file: not read
        binary, body = True, b""
    else:
        p = pygit2.Patch.create_from(old.data if old else None, new.data if new else None,
                                     old_as_path="x", new_as_path="x", context_lines=3)
        binary, body = p.delta.is_binary, p.data
        if not binary and b"\n@@ " not in body:  # an empty file added or removed: no hunk
            return text
        body = body[body.index(b"\n@@ ") + 1 :] if not binary else b""
    la = quote(a) if old else b"/dev/null"
    lb = quote(b) if new else b"/dev/null"
    if binary:
        return text + b"Binary files %s and %s differ\n" % (la, lb)
    tab = b"\t" if b" " in q else b""
    return text + b"--- %s%s\n+++ %s%s\n" % (la, tab if old else b"", lb, tab if new else b"") + body


def patches(git: pygit2.Repository, store, tree_a: str | None, tree_b: str | None,
            pointers_a: set[bytes], pointers_b: set[bytes]) -> list[tuple[bytes, bytes]]:
    """``(real path, patch bytes)`` for every world file that differs, in git's order.
    ``tree_a``/``tree_b`` are the world/fs trees (hex, or None when empty); ``pointers_*``
    the real paths the attrs mark as side-store pointers."""
    found = []
    for tpath, old, new in diff_trees(git, bytes.fromhex(tree_a) if tree_a else None,
                                      bytes.fromhex(tree_b) if tree_b else None):
        path = real_path(tpath)
        sa = _side(git, store, path, old, path in pointers_a)
        sb = _side(git, store, path, new, path in pointers_b)
        if sa and sb and (sa.mode == MODE_LINK) != (sb.mode == MODE_LINK):  # git: a delete, then an add
            text = _section(git, path, sa, None, store) + _section(git, path, None, sb, store)
        elif sa and sb and sa.mode == sb.mode and _same_content(git, sa, sb):
            continue  # a pointer re-encoded, or stored plain on one side: the same file
        else:
            text = _section(git, path, sa, sb, store)
        found.append((path, text))
    return sorted(found)
