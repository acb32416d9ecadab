"""The identity of an image's base weights: ``model/base.json`` (docs/model.md).

Parses ``--base-model NAME[@REVISION][:SHA256]`` and encodes it as canonical
JSON ``{"name", "revision", "sha256"}`` (absent parts are null). Pure; no I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...core import canonjson
from ...core.errors import DataError, UsageError

_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_BAD = re.compile(r"[\s\x00-\x1f\x7f]")
SPEC = "NAME[@REVISION][:SHA256]"


@dataclass(frozen=True)
class BaseModel:
    name: str
    revision: str | None = None
    sha256: str | None = None

    @classmethod
    def parse(cls, spec: str, flag: str = "--base-model") -> "BaseModel":
        """``NAME[@REVISION][:SHA256]``; the sha256 is 64 hex digits, optionally ``sha256:``-prefixed."""
        def bad(why: str) -> UsageError:
            return UsageError(f"{flag}: '{spec}' is not {SPEC} ({why})")

        rest, sha = spec, None
        if ":" in rest:
            rest, _, sha = rest.partition(":")
            sha = sha.removeprefix("sha256:").lower()
            if not _HEX64.match(sha):
                raise bad("the part after ':' must be a sha256 of 64 hex digits")
        name, at, revision = rest.rpartition("@") if "@" in rest else (rest, "", "")
        if not name:
            raise bad("empty name")
        if at and not revision:
            raise bad("empty revision after '@'")
        if _BAD.search(name) or _BAD.search(revision):
            raise bad("whitespace or control characters")
        return cls(name, revision or None, sha)

    def to_json(self) -> dict:
        return {"name": self.name, "revision": self.revision, "sha256": self.sha256}

    def encode(self) -> bytes:
        return canonjson.encode(self.to_json())

    @classmethod
    def decode(cls, data: bytes) -> "BaseModel":
        try:
            doc = canonjson.loads(data)
            if not isinstance(doc, dict) or not isinstance(doc.get("name"), str):
                raise ValueError("no name")
            return cls(doc["name"], doc.get("revision"), doc.get("sha256"))
        except ValueError as e:
            raise DataError(f"model/base.json is damaged ({e})") from None

    def label(self) -> str:
        text = self.name + (f"@{self.revision}" if self.revision else "")
        return text + (f":{self.sha256[:12]}" if self.sha256 else "")
