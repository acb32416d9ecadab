"""``git pf install|uninstall --claude-code``: git-pf's hook entries in a Claude Code settings file.

The entries go into ``.claude/settings.json`` of the project (the work tree's
top) or ``~/.claude/settings.json`` (``--scope user``), under ``hooks`` →
event → a matcher group of their own, so the user's own hooks stay as they
are and keep running. Installing twice changes nothing. What the file was
before (its bytes, or its absence) and what was written are kept in a state
file (``$GIT_DIR/pf/claude-code/install-<scope>.json`` for a project,
``~/.claude/git-pf-install.json`` for the user), so ``uninstall`` gives the
file back byte for byte, or, when the user changed it since, removes only
the entries git-pf added. Writes only the settings file, its directory when
absent, and the state file; a settings file that is not a JSON object is
refused and left as it is.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
from pathlib import Path

from ..errors import InputFormatError, UsageError

COMMAND = "git pf hook claude-code"
EVENTS = ("SessionStart", "PostToolUse", "Stop")
MATCHED = ("PostToolUse",)  # the events whose groups take a tool-name matcher
SCOPES = ("project", "user")


def settings_path(repo, scope: str) -> Path:
    if scope == "user":
        return Path(os.path.expanduser("~")) / ".claude" / "settings.json"
    if scope != "project":
        raise UsageError(f"--scope must be one of {'|'.join(SCOPES)}, not '{scope}'")
    if not repo.git.workdir:
        raise UsageError("a bare repository has no project directory; use --scope user")
    return Path(repo.git.workdir) / ".claude" / "settings.json"


def _state_path(repo, scope: str) -> Path:
    if scope == "user":
        return Path(os.path.expanduser("~")) / ".claude" / "git-pf-install.json"
    return repo.git_dir / "pf" / "claude-code" / "install-project.json"


def _group(event: str, command: str) -> dict:
    group = {"hooks": [{"type": "command", "command": command}]}
    return {"matcher": "*", **group} if event in MATCHED else group


def _is_ours(hook, command: str) -> bool:
    return isinstance(hook, dict) and hook.get("type") == "command" and hook.get("command") == command


def _load(path: Path, data: bytes | None) -> dict:
    if data is None or not data.strip():
        return {}
    try:
        settings = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputFormatError(f"'{path}' is not valid JSON ({e}); fix it first") from None
    if not isinstance(settings, dict):
        raise InputFormatError(f"'{path}' is not a JSON object; fix it first")
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict) or not all(isinstance(v, list) for v in hooks.values()):
        raise InputFormatError(f"'{path}': \"hooks\" must map each event to a list of matcher groups")
    return settings


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.pf-tmp")
    tmp.write_bytes(data)
    if path.exists():
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def install(repo, scope: str = "project", command: str = COMMAND) -> dict:
    """Add the hook entries; ``{"path", "scope", "added": [events]}`` (empty when all were there)."""
    path = settings_path(repo, scope)
    before = _read(path)
    settings = _load(path, before)
    hooks = settings.setdefault("hooks", {})
    added = []
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        if not any(_is_ours(h, command) for g in groups if isinstance(g, dict) for h in g.get("hooks") or []):
            groups.append(_group(event, command))
            added.append(event)
    result = {"path": str(path), "scope": scope, "added": added}
    if not added:
        return result
    data = (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    state_path = _state_path(repo, scope)
    state = _read_state(state_path)
    if state is None or state.get("written") != _digest(before or b""):  # else: keep the first original
        state = {"original": None if before is None else base64.b64encode(before).decode("ascii"),
                 "created_dir": not path.parent.exists()}
    state.update(written=_digest(data), command=command)
    path.parent.mkdir(parents=True, exist_ok=True)
    state_path.parent.mkdir(parents=True, exist_ok=True)
    _write(state_path, (json.dumps(state, indent=2) + "\n").encode())
    _write(path, data)
    return result


def _read_state(path: Path) -> dict | None:
    data = _read(path)
    if data is None:
        return None
    try:
        state = json.loads(data)
    except ValueError:
        return None
    return state if isinstance(state, dict) else None


def uninstall(repo, scope: str = "project") -> dict:
    """Give the settings file back: as it was when untouched since, else without git-pf's entries.
    ``{"path", "scope", "restored": bool, "removed": [events]}``."""
    path = settings_path(repo, scope)
    state_path = _state_path(repo, scope)
    state = _read_state(state_path) or {}
    command = state.get("command", COMMAND)
    current = _read(path)
    result = {"path": str(path), "scope": scope, "restored": False, "removed": []}
    if current is not None and state.get("written") == _digest(current):
        original = state.get("original")
        if original is None:
            path.unlink()
            if state.get("created_dir"):
                try:
                    path.parent.rmdir()
                except OSError:
                    pass  # the user put something else there
        else:
            _write(path, base64.b64decode(original))
        result.update(restored=True, removed=list(EVENTS))
    elif current is not None:
        settings = _load(path, current)
        result["removed"] = _remove_ours(settings, command)
        if result["removed"]:
            _write(path, (json.dumps(settings, indent=2, ensure_ascii=False) + "\n").encode("utf-8"))
    state_path.unlink(missing_ok=True)
    return result


def _remove_ours(settings: dict, command: str) -> list[str]:
    """Drop git-pf's hook entries (and the groups and events they leave empty); the events changed."""
    hooks = settings.get("hooks", {})
    removed = []
    for event in list(hooks):
        groups = []
        for group in hooks[event]:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list) \
                    and any(_is_ours(h, command) for h in group["hooks"]):
                rest = [h for h in group["hooks"] if not _is_ours(h, command)]
                if event not in removed:
                    removed.append(event)
                if rest:
                    groups.append({**group, "hooks": rest})
            else:
                groups.append(group)
        if groups:
            hooks[event] = groups
        else:
            del hooks[event]
    if "hooks" in settings and not hooks:
        del settings["hooks"]
    return removed
