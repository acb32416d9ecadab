"""``world/procs.json``: the agent's process table (docs/format.md, "The process table").

A table is ``{"schema": 1, "root": PID, "processes": [...]}``, one entry per
process sorted by pid, each ``{"pid", "ppid", "argv", "cwd", "exe", "uid"}``
(``cwd`` / ``exe`` null where they cannot be read). Only what identifies a
process is kept, never what changes while it idles (state, CPU time,
memory), so the same process tree gives the same bytes. Process
environments are not recorded: the env layer holds the agent's environment,
redacted. Captured from ``/proc`` for a root pid and all its descendants, or
read from a JSON file. ``decode`` reads a stored table (image data: a
malformed one is a ``DataError``); ``read_input`` a user's file (an
``InputFormatError``); both check the same rules. Reads ``/proc`` and the
user's file; writes one blob through a ``TreeEdit``; moves no refs.
"""
from __future__ import annotations

import os
from pathlib import Path

from ...core import canonjson, jsonl
from ...image import manifest as img
from ...core.errors import DataError, InputFormatError, UsageError
from ...image.tree import read_blob

SCHEMA = 1
NAME = "procs"
FIELDS = ("pid", "ppid", "argv", "cwd", "exe", "uid")


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return None


def _link(path: str) -> str | None:
    try:
        return os.fsdecode(os.readlink(path))
    except OSError:
        return None


def _status(pid: int) -> dict[str, str]:
    data = _read(f"/proc/{pid}/status") or b""
    out = {}
    for line in data.decode("utf-8", "replace").splitlines():
        key, _, value = line.partition(":")
        out[key] = value.strip()
    return out


def _one(pid: int) -> dict | None:
    status = _status(pid)
    cmdline = _read(f"/proc/{pid}/cmdline")
    if not status or cmdline is None:
        return None  # gone while we looked
    return {
        "pid": pid,
        "ppid": int(status.get("PPid", "0") or 0),
        "argv": [a.decode("utf-8", "surrogateescape") for a in cmdline.split(b"\0")[:-1]],
        "cwd": _link(f"/proc/{pid}/cwd"),
        "exe": _link(f"/proc/{pid}/exe"),
        "uid": int((status.get("Uid", "0").split() or ["0"])[0]),
    }


def _all() -> dict[int, dict]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            found = _one(int(name))
            if found is not None:
                out[found["pid"]] = found
    return out


def capture(root: int) -> dict:
    """The table of process ``root`` and every descendant, read from /proc now."""
    if not os.path.isdir("/proc/self"):
        raise UsageError("--capture-procs needs /proc (Linux)")
    table = _all()
    if root not in table:
        raise UsageError(f"no process with pid {root}", param="capture_procs")
    children: dict[int, list[int]] = {}
    for proc in table.values():
        children.setdefault(proc["ppid"], []).append(proc["pid"])
    keep, todo = [], [root]
    while todo:
        pid = todo.pop()
        keep.append(pid)
        todo.extend(children.get(pid, []))
    return make(root, [table[p] for p in keep])


def make(root: int | None, processes: list[dict]) -> dict:
    return {"schema": SCHEMA, "root": root,
            "processes": sorted(({k: p.get(k) for k in FIELDS} for p in processes), key=lambda p: p["pid"])}


def read_input(path: Path, flag: str = "--procs") -> dict:
    """A table from a JSON file: a table as stored, or a bare list of process objects."""
    obj = jsonl.read_json(path, flag)
    procs = obj if isinstance(obj, list) else obj.get("processes") if isinstance(obj, dict) else None
    if not isinstance(procs, list) or not all(isinstance(p, dict) and _is_int(p.get("pid")) for p in procs):
        raise InputFormatError(f"{flag}: '{path}' must hold a list of processes, each an object with an integer pid")
    root = obj.get("root") if isinstance(obj, dict) else None
    table = make(root if _is_int(root) else None, procs)
    problem = _problem(table)
    if problem:
        raise InputFormatError(f"{flag}: '{path}': {problem}")
    return table


def decode(data: bytes, where: str = "world/procs.json") -> dict:
    """The table of an image's ``world/procs.json``; DataError naming ``where`` when malformed."""
    table = jsonl.loads(data, where)
    problem = _problem(table)
    if problem:
        raise DataError(f"{where}: {problem}")
    return table


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


_TYPES = {"pid": (_is_int, "an integer"), "ppid": (lambda v: v is None or _is_int(v), "an integer or null"),
          "argv": (lambda v: v is None or (isinstance(v, list) and all(isinstance(a, str) for a in v)),
                   "a list of strings or null"),
          "cwd": (lambda v: v is None or isinstance(v, str), "a string or null"),
          "exe": (lambda v: v is None or isinstance(v, str), "a string or null"),
          "uid": (lambda v: v is None or _is_int(v), "an integer or null")}


def _problem(table) -> str | None:
    """What is wrong with a process table (docs/format.md, "The process table"), or None."""
    if not isinstance(table, dict) or set(table) != {"schema", "root", "processes"}:
        return "must be an object with exactly schema, root and processes"
    if table["schema"] != SCHEMA or not _is_int(table["schema"]):
        return f"schema must be {SCHEMA}"
    if table["root"] is not None and not _is_int(table["root"]):
        return "root must be an integer or null"
    if not isinstance(table["processes"], list):
        return "processes must be a list"
    last = None
    for i, proc in enumerate(table["processes"], 1):
        if not isinstance(proc, dict) or set(proc) != set(FIELDS):
            return f"process {i} must be an object with exactly {', '.join(FIELDS)}"
        for key, (ok, what) in _TYPES.items():
            if not ok(proc[key]):
                return f"process {i}: {key} must be {what}"
        if last is not None and proc["pid"] <= last:
            return f"process {i}: processes must be sorted by pid, each pid once"
        last = proc["pid"]
    return None


def summary(table: dict) -> dict:
    """The manifest summary of a table (``layers.procs``)."""
    return {"processes": len(table["processes"])}


def merged_summary(git, changes: dict) -> dict | None:
    """``layers.procs`` after a merge applied ``changes``; None when the table did not change."""
    if img.WORLD_PROCS not in changes:
        return None
    change = changes[img.WORLD_PROCS]
    return None if change is None else summary(decode(read_blob(git, change[1])))


class ProcsInput:
    """A process table to write into the next snapshot as ``world/procs.json``."""

    name = NAME

    def __init__(self, table: dict):
        self.table = table

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        edit.put_file(img.WORLD_PROCS, canonjson.encode(self.table))
        return summary(self.table)
