"""``world/procs.json``: the agent's process table (docs/format.md, "The process table").

A table is ``{"schema": 1, "root": PID, "processes": [...]}``, one entry per
process sorted by pid, each ``{"pid", "ppid", "argv", "cwd", "exe", "uid"}``
(``cwd`` / ``exe`` null where they cannot be read). Only what identifies a
process is kept, never what changes while it idles (state, CPU time,
memory), so the same process tree gives the same bytes. Process
environments are not recorded: the env layer holds the agent's environment,
redacted. Captured from ``/proc`` for a root pid and all its descendants, or
read from a JSON file. Reads ``/proc`` and the user's file; writes one blob
through a ``TreeEdit``; moves no refs.
"""
from __future__ import annotations

import os
from pathlib import Path

from . import canonjson, image as img, jsonl
from .errors import InputFormatError, UsageError
from .gittree import read_blob

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
        raise UsageError(f"--capture-procs: no process with pid {root}")
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
    if not isinstance(procs, list) or not all(isinstance(p, dict) and isinstance(p.get("pid"), int) for p in procs):
        raise InputFormatError(f"{flag}: '{path}' must hold a list of processes, each an object with an integer pid")
    root = obj.get("root") if isinstance(obj, dict) else None
    return make(root if isinstance(root, int) else None, procs)


def summary(table: dict) -> dict:
    """The manifest summary of a table (``layers.procs``)."""
    return {"processes": len(table["processes"])}


def merged_summary(git, changes: dict) -> dict | None:
    """``layers.procs`` after a merge applied ``changes``; None when the table did not change."""
    if img.WORLD_PROCS not in changes:
        return None
    change = changes[img.WORLD_PROCS]
    return None if change is None else summary(canonjson.loads(read_blob(git, change[1])))


class ProcsInput:
    """A process table to write into the next snapshot as ``world/procs.json``."""

    name = NAME

    def __init__(self, table: dict):
        self.table = table

    def write(self, repo, edit: img.TreeEdit, parent: img.ImageInfo | None) -> dict:
        edit.put_file(img.WORLD_PROCS, canonjson.encode(self.table))
        return summary(self.table)
