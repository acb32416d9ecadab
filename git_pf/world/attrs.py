"""``world/fs.attrs.jsonl``: what a git tree cannot hold about sandbox paths.

One canonical JSON object per path that needs one, sorted by the raw path
bytes: permission bits other than git's defaults, ``user.*`` xattrs
(base64 values), directories (so empty ones survive), and which files are
side-store pointers. Paths are the sandbox's real names, not the escaped
tree names. Spec: docs/format.md. Pure encode/decode.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field

from .. import canonjson
from ..errors import InputFormatError

DEFAULT_FILE_MODE = 0o644
DEFAULT_EXEC_MODE = 0o755
DEFAULT_DIR_MODE = 0o755


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
    def from_json(cls, obj: dict) -> "PathAttrs":
        if "path" in obj:
            path = obj["path"].encode("utf-8")
        else:
            path = base64.b64decode(obj["path_b64"])
        mode = int(obj["mode"], 8) if "mode" in obj else None
        xattrs = {k: base64.b64decode(v) for k, v in obj.get("xattrs", {}).items()}
        return cls(path, obj.get("type") == "dir", mode, xattrs, bool(obj.get("pointer", False)))

    def is_trivial(self) -> bool:
        """True when the entry says nothing a tree does not (and can be left out)."""
        return not (self.is_dir or self.mode is not None or self.xattrs or self.pointer)


def encode(entries: list[PathAttrs]) -> bytes:
    return canonjson.encode_lines([e.to_json() for e in sorted(entries, key=lambda e: e.path) if not e.is_trivial()])


def decode(data: bytes, where: str = "world/fs.attrs.jsonl") -> dict[bytes, PathAttrs]:
    out: dict[bytes, PathAttrs] = {}
    for lineno, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entry = PathAttrs.from_json(canonjson.loads(line))
        except (ValueError, KeyError, TypeError) as e:
            raise InputFormatError(f"{where}:{lineno}: malformed attrs entry ({e})") from None
        out[entry.path] = entry
    return out
