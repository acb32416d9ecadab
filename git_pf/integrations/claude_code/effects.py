"""Claude Code's tool calls inside a recorded run: onto the run's ledger, and answered from it on replay.

When Claude Code runs under ``git pf record``, ``replay`` or ``run``, its hooks inherit the run's
environment (``GIT_PF_MODE``, ``GIT_PF_CHANNEL``, ``GIT_PF_REPLAY``: docs/record.md, "Draws"). Then
``PostToolUse`` and ``PostToolUseFailure`` append the call to the run's channel as an ``effect``
event (tool, ``tool_input`` as args, the ``tool_response`` or the error, the class: the default or
``pf.claudeCode.<tool>.sideEffect`` of the project's repository, ``tool_use_id`` as the idempotency key), so the recorded run's ledger lists Claude Code's tools as it lists
``git_pf.tool`` calls. On replay and in a run's prefix, ``PreToolUse`` claims the ledger entry of
each call (same tool, same arguments; each entry once) and says so on the channel (a ``replayed``
event, which the replay report counts). An irreversible call the ledger holds is never made again:
a Bash call's input is rewritten (``updatedInput``) to a command that prints the recorded output
from a file written here, in the run's private directory, and exits with the recorded status, so
Claude Code's tool result is the recorded one byte for byte; any other irreversible tool (an MCP
tool, ...) has no faithful substitute and is denied, saying so, as is a Bash call whose recorded
output was redacted, cut or interrupted. On replay, an irreversible call the ledger does not hold is
denied unless the run allows effects; in a run, a call no ledger entry is left for is the live
part's and runs. Standard library only (the hook's warm path); reads the replay file, appends to
the channel, writes its answers beside the replay file.
"""
from __future__ import annotations

import json
import os
import re
import time

PURE = ("Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite", "BashOutput")
IDEMPOTENT = ("Write", "Edit", "MultiEdit", "NotebookEdit")
DEFAULT_CLASSES = {**dict.fromkeys(PURE, "pure"), **dict.fromkeys(IDEMPOTENT, "idempotent")}
RESULT_KEPT_CHARS = 16 * 1024


def active() -> bool:
    """True when this hook runs inside a recorded run (its channel is in the environment)."""
    return bool(os.environ.get("GIT_PF_MODE") and os.environ.get("GIT_PF_CHANNEL"))


def side_effect(tool: str, configured: str | None = None) -> str:
    """A tool's side-effect class: ``configured`` (``pf.claudeCode.<tool>.sideEffect``) when set,
    else the default for the tool (irreversible); ValueError when ``configured`` is no class."""
    if configured is None:
        return DEFAULT_CLASSES.get(tool, "irreversible")
    from ...layers.effects.ledger import CLASSES

    if configured not in CLASSES:
        raise ValueError(f"pf.claudeCode.{tool}.sideEffect must be one of {'|'.join(CLASSES)}, not {configured!r}")
    return configured


def _class_of(tool: str, event: dict) -> str:
    """The class git config gives ``tool`` in the repository the event's project is in."""
    import subprocess

    from .hook import _start_dir

    out = subprocess.run(["git", "-C", _start_dir(event), "config", "--get", f"pf.claudeCode.{tool}.sideEffect"],
                         capture_output=True)
    return side_effect(tool, os.fsdecode(out.stdout.rstrip(b"\n")) if out.returncode == 0 else None)


def handle(event: dict) -> dict | None:
    """Do what the run needs for one event; the JSON Claude Code must read on stdout, or None."""
    name = event.get("hook_event_name")
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        return None
    mode = os.environ["GIT_PF_MODE"]
    if name in ("PostToolUse", "PostToolUseFailure"):
        if mode == "record" or mode == "run" and not _answered(event):
            _emit({"t": "effect", "entry": _entry(event, tool, name == "PostToolUseFailure", _class_of(tool, event))})
        return None
    if name != "PreToolUse" or mode not in ("replay", "run"):
        return None
    replay = _replay_file()
    found = _claim(event, replay)
    key = event.get("tool_use_id")
    if found is None:
        if _class_of(tool, event) != "irreversible" or replay.get("allow_effects") or mode == "run":
            return None  # a run's live part, or a call replay may make again
        return _deny(tool, key, event, f"irreversible tool {tool!r} (call {key}) with arguments the recorded "
                     "ledger does not hold (replay with --allow-effects to let it run)", diverged=True)
    index, entry = found
    if entry.get("side_effect_class", _class_of(tool, event)) != "irreversible":
        _emit({"t": "replayed", "tool": tool, "key": key, "index": index, "how": "ran"})
        return None  # pure or idempotent: made again, in the run's world
    why = _unanswerable(tool, entry)
    if why is None:
        command = _answer(index, entry)
        _emit({"t": "replayed", "tool": tool, "key": key, "index": index, "how": "answered"})
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow",
                                       "permissionDecisionReason": "git-pf: answered from the recorded ledger",
                                       "updatedInput": dict(event.get("tool_input") or {}, command=command)}}
    if replay.get("allow_effects"):
        _emit({"t": "replayed", "tool": tool, "key": key, "index": index, "how": "ran"})
        return None  # --allow-effects: made again for real
    return _deny(tool, key, event, f"irreversible tool {tool!r} (call {key}) is on the recorded ledger but {why}, "
                 "so it was denied rather than made again; the tool result, and so the next request, differ "
                 "from the recording (replay with --allow-effects to make it again)", diverged=True)


def _deny(tool: str, key, event: dict, detail: str, diverged: bool) -> dict:
    if diverged:
        _emit({"t": "diverged", "what": "effect", "index": None, "expected": None,
               "got": {"tool": tool, "args": event.get("tool_input")}, "detail": detail})
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                                   "permissionDecisionReason": f"git-pf: {detail}"}}


_EXIT = re.compile(r"Exit code (\d+)(?:\n(.*))?", re.S)


def _unanswerable(tool: str, entry: dict) -> str | None:
    """Why the recorded call cannot be answered by a substitute command (None: it can)."""
    if tool != "Bash":
        return "git-pf can answer only a Bash call in Claude Code's place"
    if entry.get("redacted"):
        return "its recorded output had secrets redacted, so it cannot be given back as it was"
    error, result = entry.get("error"), entry.get("result")
    if error is not None:
        if not isinstance(error, str) or not _EXIT.fullmatch(error):
            return "its recorded failure is not an exit status with output"
        return None
    if not isinstance(result, dict) or not isinstance(result.get("stdout"), str) \
            or not isinstance(result.get("stderr", ""), str):
        return "its recorded output was not kept (over the ledger's size limit)" if isinstance(result, dict) \
            and result.get("kept") is False else "its recorded output has no stdout"
    if result.get("interrupted") or result.get("isImage") or result.get("backgroundTaskId"):
        return "it was interrupted, ran in the background or returned an image"
    return None


def _answer(index: int, entry: dict) -> str:
    """Write the recorded output beside the replay file; the command that gives it back."""
    error = entry.get("error")
    if error is not None:
        m = _EXIT.fullmatch(error)
        out, err, status = m.group(2) or "", "", int(m.group(1))
    else:
        out, err, status = entry["result"]["stdout"], entry["result"].get("stderr") or "", 0
    base = _answer_base(index)
    for suffix, text in ((".out", out), (".err", err)):
        fd = os.open(base + suffix, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
            f.write(text)
    q = _quote(base)
    return f"cat -- {q}.out'; cat -- {q}.err' >&2; exit {status}"


def _answer_base(index: int) -> str:
    return os.path.join(os.path.dirname(os.path.abspath(os.environ["GIT_PF_REPLAY"])), f"answer-{index}")


def _quote(path: str) -> str:
    """``path`` opened in single quotes, left open for a suffix."""
    return "'" + path.replace("'", "'\\''")


def _answered(event: dict) -> bool:
    """This call's input is a substitute ``_answer`` wrote (its PostToolUse sees the rewritten input)."""
    if not os.environ.get("GIT_PF_REPLAY") or event.get("tool_name") != "Bash":
        return False
    command = (event.get("tool_input") or {}).get("command")
    prefix = "cat -- " + _quote(os.path.join(os.path.dirname(os.path.abspath(os.environ["GIT_PF_REPLAY"])), "answer-"))
    return isinstance(command, str) and command.startswith(prefix)


def _claim(event: dict, replay: dict) -> tuple[int, dict] | None:
    """The first ledger entry not yet claimed that holds this call (the one with its ``tool_use_id``
    first), claimed for it (a marker beside the replay file: hooks run as separate processes)."""
    from ...core import secrets

    want = _canonical(secrets.redact_json(event.get("tool_input")))
    key = event.get("tool_use_id")
    same = [(i, e) for i, e in enumerate(replay.get("effects") or ())
            if isinstance(e, dict) and e.get("tool") == event.get("tool_name") and _canonical(e.get("args")) == want]
    same.sort(key=lambda pair: pair[1].get("idempotency_key") != key)
    for i, entry in same:
        try:
            os.close(os.open(_answer_base(i) + ".claimed", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        except FileExistsError:
            continue
        return i, entry
    return None


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


def _entry(event: dict, tool: str, failed: bool, side_effect_class: str) -> dict:
    from ...core import secrets

    response = None if failed else event.get("tool_response")
    result = secrets.redact_json(response)
    error = event.get("error")
    error = error if isinstance(error, str) else _canonical(error)
    redacted = result != response or failed and secrets.redact_text(error) != error
    if len(_canonical(result)) > RESULT_KEPT_CHARS:
        result = {"kept": False, "chars": len(_canonical(result))}
    key = event.get("tool_use_id")
    entry = {"tool": tool, "args": secrets.redact_json(event.get("tool_input")), "result": result,
             "side_effect_class": side_effect_class,
             "idempotency_key": key if isinstance(key, str) and key else f"{tool}:{time.monotonic_ns()}",
             "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if failed:
        entry["error"] = secrets.redact_text(error)
    if redacted:
        entry["redacted"] = True  # a replay cannot give this output back as it was
    return entry


def _emit(event: dict) -> None:
    line = (json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n").encode()
    fd = os.open(os.environ["GIT_PF_CHANNEL"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        while line:
            line = line[os.write(fd, line):]
    finally:
        os.close(fd)
