"""Claude Code's tool calls inside a recorded run: onto the run's ledger, and checked against it on replay.

When Claude Code runs under ``git pf record``, ``replay`` or ``run``, its hooks inherit the run's
environment (``GIT_PF_MODE``, ``GIT_PF_CHANNEL``, ``GIT_PF_REPLAY``: docs/record.md, "Draws"). Then
``PostToolUse`` and ``PostToolUseFailure`` append the call to the run's channel as an ``effect``
event (tool, ``tool_input`` as args, the result or error, the class, ``tool_use_id`` as the
idempotency key), so the recorded run's ledger lists Claude Code's tools as it lists
``git_pf.tool`` calls. On replay and in a run's prefix, ``PreToolUse`` denies an irreversible call
that the recorded ledger does not hold, or holds with other arguments (unless the run allows
effects), and the run notes the divergence on the channel. A call the ledger holds runs again (a
hook cannot answer a tool call in Claude Code's place). Standard library only (the hook's warm path); reads the replay file, appends to the channel.
"""
from __future__ import annotations

import json
import os
import time

PURE = ("Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite", "BashOutput")
IDEMPOTENT = ("Write", "Edit", "MultiEdit", "NotebookEdit")
DEFAULT_CLASSES = {**dict.fromkeys(PURE, "pure"), **dict.fromkeys(IDEMPOTENT, "idempotent")}
RESULT_KEPT_CHARS = 16 * 1024


def active() -> bool:
    """True when this hook runs inside a recorded run (its channel is in the environment)."""
    return bool(os.environ.get("GIT_PF_MODE") and os.environ.get("GIT_PF_CHANNEL"))


def side_effect(tool: str) -> str:
    return DEFAULT_CLASSES.get(tool, "irreversible")


def handle(event: dict) -> dict | None:
    """Do what the run needs for one event; the JSON Claude Code must read on stdout (a denial), or None."""
    name = event.get("hook_event_name")
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        return None
    mode = os.environ["GIT_PF_MODE"]
    if name in ("PostToolUse", "PostToolUseFailure") and (mode == "record" or mode == "run" and not _recorded(event)):
        _emit({"t": "effect", "entry": _entry(event, tool, name == "PostToolUseFailure")})
        return None
    if name != "PreToolUse" or mode not in ("replay", "run") or side_effect(tool) != "irreversible":
        return None
    replay = _replay_file()
    if replay.get("allow_effects") or (mode == "run" and not replay.get("effects")):
        return None  # a run past its recorded prefix goes on live
    if _recorded(event, replay):
        return None
    key = event.get("tool_use_id")
    detail = (f"irreversible tool {tool!r} (call {key}) with arguments the recorded ledger does not hold "
              f"(replay with --allow-effects to let it run)")
    _emit({"t": "diverged", "what": "effect", "index": None, "expected": None,
           "got": {"tool": tool, "args": event.get("tool_input")}, "detail": detail})
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": f"git-pf: {detail}"}}


def _replay_file() -> dict:
    path = os.environ.get("GIT_PF_REPLAY")
    try:
        with open(path, "rb") as f:
            data = json.load(f)
    except (OSError, TypeError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _canonical(value) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _recorded(event: dict, replay: dict | None = None) -> bool:
    """The recorded ledger holds this call (same tool, same redacted arguments)."""
    from .. import secrets

    replay = _replay_file() if replay is None else replay
    want = _canonical(secrets.redact_json(event.get("tool_input")))
    for entry in replay.get("effects") or ():
        if isinstance(entry, dict) and entry.get("tool") == event.get("tool_name") \
                and _canonical(entry.get("args")) == want:
            return True
    return False


def _entry(event: dict, tool: str, failed: bool) -> dict:
    from .. import secrets

    result = None if failed else secrets.redact_json(event.get("tool_response"))
    if len(_canonical(result)) > RESULT_KEPT_CHARS:
        result = {"kept": False, "chars": len(_canonical(result))}
    key = event.get("tool_use_id")
    entry = {"tool": tool, "args": secrets.redact_json(event.get("tool_input")), "result": result,
             "side_effect_class": side_effect(tool),
             "idempotency_key": key if isinstance(key, str) and key else f"{tool}:{time.monotonic_ns()}",
             "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if failed:
        error = event.get("error")
        entry["error"] = secrets.redact_text(error if isinstance(error, str) else _canonical(error))
    return entry


def _emit(event: dict) -> None:
    line = (json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()
    fd = os.open(os.environ["GIT_PF_CHANNEL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        while line:
            line = line[os.write(fd, line):]
    finally:
        os.close(fd)
