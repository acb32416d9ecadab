"""``world/fs.attrs.jsonl``: what a git tree cannot hold about sandbox paths.

One canonical JSON object per path that needs one, sorted by the raw path
bytes: permission bits other than git's defaults, ``user.*`` xattrs
(base64 values), directories (so empty ones survive), and which files are
side-store pointers. Paths are the sandbox's real names, not the escaped
tree names. Spec: docs/format.md. Pure encode/decode; ``decode`` reads
image data, so every field's type is checked and a malformed line is a
``DataError`` naming its line.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass, field

from ...core import canonjson, jsonl
from ...core.errors import DataError

DEFAULT_FILE_MODE = 0o644
DEFAULT_EXEC_MODE = 0o755
DEFAULT_DIR_MODE = 0o755
KEYS = {"path", "path_b64", "type", "mode", "xattrs", "pointer"}
_MODE = re.compile(r"[0-7]{4}")


@dataclass
class PathAttrs:
    path: bytes
    is_dir: bool = False
    mode: int | None = None  # permission bits when not the default for the kind
    xattrs: dict[str, bytes] = field(default_factory=dict)
    pointer: bool = False

    def to_json(self) -> dict:
        out: dict = {}
        try:
            out["path"] = self.path.decode("utf-8")
        except UnicodeDecodeError:
            out["path_b64"] = base64.b64encode(self.path).decode("ascii")
        if self.is_dir:
            out["type"] = "dir"
        if self.mode is not None:
            out["mode"] = f"{self.mode:04o}"
        if self.xattrs:
            out["xattrs"] = {k: base64.b64encode(v).decode("ascii") for k, v in sorted(self.xattrs.items())}
        if self.pointer:
            out["pointer"] = True
        return out

    @classmethod
    def from_json(cls, obj) -> "PathAttrs":
        """An entry from its JSON object; ValueError naming the first field that is malformed."""
        if not isinstance(obj, dict):
            raise ValueError("not a JSON object")
        unknown = sorted(obj.keys() - KEYS)
        if unknown:
            raise ValueError(f"unknown key {_show(unknown[0])}")
        if ("path" in obj) == ("path_b64" in obj):
            raise ValueError("needs exactly one of path and path_b64")
        if "path" in obj:
            if not isinstance(obj["path"], str) or not obj["path"]:
                raise ValueError("path must be a non-empty string")
            try:
                path = obj["path"].encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError("path is not valid UTF-8 text (use path_b64)") from None
        else:
            path = _b64(obj["path_b64"], "path_b64")
            if not path:
                raise ValueError("path_b64 must not be empty")
        if obj.get("type", "dir") != "dir":
            raise ValueError('type must be "dir"')
        mode = obj.get("mode")
        if mode is not None and not (isinstance(mode, str) and _MODE.fullmatch(mode)):
            raise ValueError("mode must be 4 octal digits (at most 7777)")
        xattrs = obj.get("xattrs", {})
        if not isinstance(xattrs, dict):
            raise ValueError("xattrs must be an object")
        for name in xattrs:
            if not name.startswith("user.") or name == "user.":
                raise ValueError(f"xattr {_show(name)} is not in the user. namespace")
        if not isinstance(obj.get("pointer", False), bool):
            raise ValueError("pointer must be true or false")
        return cls(path, "type" in obj, int(mode, 8) if mode is not None else None,
                   {k: _b64(v, f"xattr {_show(k)}") for k, v in xattrs.items()}, obj.get("pointer", False))

    def is_trivial(self) -> bool:
        """True when the entry says nothing a tree does not (and can be left out)."""
        return not (self.is_dir or self.mode is not None or self.xattrs or self.pointer)


def encode(entries: list[PathAttrs]) -> bytes:
    return canonjson.encode_lines([e.to_json() for e in sorted(entries, key=lambda e: e.path) if not e.is_trivial()])


def _show(name: str) -> str:
    """A name from an image as one quoted line (control characters escaped), at most 80 characters."""
    return canonjson.dumps(name[:80])


def _b64(value, what: str) -> bytes:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except binascii.Error:
        raise ValueError(f"{what} is not valid base64") from None


def decode(data: bytes, where: str = "world/fs.attrs.jsonl") -> dict[bytes, PathAttrs]:
    """Entries by path, from an image's attrs file; DataError naming ``where:LINE`` on a malformed line."""
    out: dict[bytes, PathAttrs] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        obj = jsonl.loads(line, f"{where}:{lineno}")
        try:
            entry = PathAttrs.from_json(obj)
        except ValueError as e:
            raise DataError(f"{where}:{lineno}: malformed attrs entry: {e}") from None
        out[entry.path] = entry
    return out
