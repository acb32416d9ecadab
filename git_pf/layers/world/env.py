"""``world/env.json``: the agent's working directory and environment, secrets redacted.

Redaction is on by default: a variable is redacted when its name looks
secret (contains KEY, TOKEN, SECRET, PASSWORD, PASSWD, or ends in
_CREDENTIALS / CREDENTIALS, case-insensitive) or its value looks like one (a
bearer token, a URL with a password, a well-known key prefix, a JWT). A
redacted value is replaced by a fixed marker and its name listed under
``redacted``, so the same environment always gives the same bytes.
Pure data handling plus reading a JSON file. ``Env.decode`` reads image data:
a malformed document is a ``DataError``; ``from_file`` reads a user's file:
a malformed one is an ``InputFormatError``.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ...core import canonjson, jsonl
from ...core.errors import DataError, InputFormatError
from ...core.secrets import REDACTED, looks_secret

PATH = "world/env.json"


@dataclass
class Env:
    cwd: str | None = None
    vars: dict[str, str] = field(default_factory=dict)
    redacted: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"cwd": self.cwd, "env": dict(sorted(self.vars.items())), "redacted": sorted(self.redacted)}

    def encode(self) -> bytes:
        return canonjson.encode(self.to_json())

    @classmethod
    def decode(cls, data: bytes, where: str = PATH) -> "Env":
        """The env of an image's ``world/env.json``; DataError naming ``where`` when malformed."""
        obj = jsonl.loads(data, where)
        problem = _problem(obj)
        if problem:
            raise DataError(f"{where}: {problem}")
        return cls(obj.get("cwd"), dict(obj.get("env", {})), list(obj.get("redacted", [])))


def _problem(obj) -> str | None:
    """What is wrong with a stored env document, or None (docs/format.md, ``world/env.json``)."""
    if not isinstance(obj, dict):
        return "must be a JSON object"
    unknown = sorted(obj.keys() - {"cwd", "env", "redacted"})
    if unknown:
        return f"unknown key {canonjson.dumps(unknown[0][:80])}"
    if not isinstance(obj.get("cwd"), (str, type(None))):
        return "cwd must be a string or null"
    variables = obj.get("env", {})
    if not isinstance(variables, dict) or not all(isinstance(v, str) for v in variables.values()):
        return "env must be an object of strings"
    redacted = obj.get("redacted", [])
    if not isinstance(redacted, list) or not all(isinstance(n, str) for n in redacted):
        return "redacted must be a list of strings"
    return None


def redact(env: Env, keep: set[str]) -> Env:
    out, redacted = {}, set(env.redacted)
    for name, value in env.vars.items():
        if name not in keep and value != REDACTED and looks_secret(name, value):
            out[name] = REDACTED
            redacted.add(name)
        else:
            out[name] = value
    return Env(env.cwd, out, sorted(redacted))


def from_process() -> Env:
    return Env(os.getcwd(), dict(os.environ))


def from_file(path: Path) -> Env:
    """Read ``{"cwd": ..., "env": {...}}`` or a flat ``{"NAME": "value"}`` mapping."""
    obj = jsonl.read_json(path, "--env")
    if not isinstance(obj, dict):
        raise InputFormatError(f"'{path}' must hold a JSON object", param="env")
    if isinstance(obj.get("env"), dict):
        cwd, variables = obj.get("cwd"), obj["env"]
    else:
        cwd, variables = None, obj
    bad = [k for k, v in variables.items() if not isinstance(v, str)]
    if bad or (cwd is not None and not isinstance(cwd, str)):
        raise InputFormatError(f"'{path}': every value must be a string (not {bad[0] if bad else 'cwd'})", param="env")
    return Env(cwd, dict(variables))
