"""The channel between a run's child and the command that runs it (docs/record.md, "Draws").

The child's hook (``git_pf.runs.hook.sitecustomize``) and ``git_pf.tool`` append one JSON event per
line to the channel file: ``draw``, ``effect``, ``consumed``, ``diverged``; Claude Code's hook adds
``replayed`` for each of its tool calls answered from, or made again as, a ledger entry. ``ChannelReader``
takes the complete lines appended since its last call; ``write_replay_file`` writes what a
replayed or run-on child is fed (the recorded draws and effects, checked first: they come from
an image). Files only; knows no git and no HTTP.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from ..core import canonjson
from ..core.errors import DataError, UsageError

# Each draw function and the JSON type of its recorded value (docs/record.md has the table).
DRAW_FNS = {
    "time.time": "number", "time.time_ns": "int",
    "datetime.now": "int", "datetime.utcnow": "int", "datetime.today": "int",
    "uuid.uuid1": "uuid", "uuid.uuid4": "uuid",
    "os.urandom": "hex", "random.seed": "int", "git_pf.seed": "seed",
}
# A draw whose bytes came from the run's stream (keyed by the git_pf.seed draw before it) records
# this instead of its value: null, or for os.urandom its size.
STREAMED = {"uuid.uuid4": "null", "random.seed": "null", "os.urandom": "size"}
EVENTS = ("draw", "effect", "consumed", "diverged", "replayed")
MODES = ("replay", "run")


class ChannelReader:
    """Reads the events appended to a channel file, a batch at a time; a partial last line
    stays for the next call, and malformed lines are skipped and counted in ``bad``."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.offset = 0
        self.partial = b""
        self.bad = 0

    def new_events(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()
        events = []
        for line in lines:
            try:
                event = json.loads(line)
            except ValueError:
                event = None
            if isinstance(event, dict) and event.get("t") in EVENTS:
                events.append(event)
            elif line.strip():
                self.bad += 1
        return events


def draws(events: list[dict]) -> list[dict]:
    """The DRAWs (``{"fn", "v"}``) among channel events, in order."""
    return [{"fn": e.get("fn"), "v": e.get("v")} for e in events if e.get("t") == "draw"]


def effects(events: list[dict]) -> list[dict]:
    """The effects ledger entries among channel events, in order."""
    return [e["entry"] for e in events if e.get("t") == "effect" and isinstance(e.get("entry"), dict)]


def check_draw(draw, where: str) -> dict:
    """A recorded DRAW, checked: a known function and a value of its type (DataError naming
    ``where`` otherwise)."""
    if not isinstance(draw, dict) or not isinstance(draw.get("fn"), str) or "v" not in draw:
        raise DataError(f"{where}: a draw must be an object with fn and v")
    kind = DRAW_FNS.get(draw["fn"])
    v = draw["v"]
    if kind is None:
        raise DataError(f"{where}: unknown draw function {draw['fn'][:60]!r}")
    streamed = {"null": v is None, "size": type(v) is int and 0 <= v <= 1 << 31}.get(STREAMED.get(draw["fn"]), False)
    ok = streamed or {
        "number": isinstance(v, (int, float)) and not isinstance(v, bool),
        "int": isinstance(v, int) and not isinstance(v, bool),
        "uuid": isinstance(v, str) and len(v) == 36,
        "hex": isinstance(v, str) and len(v) % 2 == 0 and _is_hex(v),
        "seed": isinstance(v, str) and len(v) == 64 and _is_hex(v),
    }[kind]
    if not ok:
        raise DataError(f"{where}: the value of a {draw['fn']} draw is not a {kind}")
    return {"fn": draw["fn"], "v": v}


def _is_hex(text: str) -> bool:
    try:
        bytes.fromhex(text)
    except ValueError:
        return False
    return True


def write_replay_file(path: Path, *, draws: list[dict], effects: list[dict], allow_effects: bool,
                      mode: str, blobs: dict[str, str] | None = None) -> None:
    """Write what a replayed (``mode="replay"``) or run-on (``"run"``) child is fed: the draws in
    order, the effects ledger its tool calls are answered from and ``blobs`` (blob id -> base64),
    the files those calls wrote."""
    if mode not in MODES:
        raise UsageError(f"a replay file's mode must be one of {'|'.join(MODES)}, not {mode!r}")
    checked = [check_draw(d, f"draw {i}") for i, d in enumerate(draws, 1)]
    for i, entry in enumerate(effects, 1):
        if not isinstance(entry, dict) or not isinstance(entry.get("tool"), str):
            raise DataError(f"effect {i}: a ledger entry must be an object with a tool name")
    doc = {"v": 1, "mode": mode, "draws": checked, "effects": list(effects), "allow_effects": bool(allow_effects),
           "blobs": dict(blobs or {})}
    tmp = Path(f"{path}.tmp")
    tmp.write_bytes(canonjson.encode(doc))
    os.replace(tmp, path)
