"""``git pf install|uninstall --claude-code``: git-pf's hook entries in a Claude Code settings file.

The entries go into ``.claude/settings.json`` of the project (the work tree's
top) or the user's ``settings.json`` (``--scope user``: in ``$CLAUDE_CONFIG_DIR``,
else ``~/.claude``), under ``hooks`` → event → a matcher group of their own, so
the user's own hooks stay as they are and keep running. The command names the
``git-pf`` that installs it by its absolute path, so Claude Code's ``PATH`` does
not matter; ``check`` runs a test event through each installed command as
Claude Code would. Installing twice changes nothing. What the file was
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
import re
import shlex
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

from ...core.errors import InputFormatError, UsageError

COMMAND = "git pf hook claude-code"  # what earlier versions wrote; still recognised as git-pf's
EVENTS = ("SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd")
MATCHED = ("PreToolUse", "PostToolUse", "PostToolUseFailure")  # the events whose groups take a tool-name matcher
SCOPES = ("project", "user")
CHECK_TIMEOUT_S = 60.0
# PreToolUse only matters inside a recorded run: a shell test spares Claude Code a Python process per call
RUN_GUARD = '[ -z "$GIT_PF_CHANNEL" ] || '
GUARDED = ("PreToolUse",)
_OURS = re.compile(r"^(\[ -z \"\$GIT_PF_CHANNEL\" \] \|\| )?(git pf|\S*git-pf'?|\S+ -m git_pf|\S+ -S \S*(?:claude_code_hook|claude_code/hook)(_main)?\.py'?) "
                   r"hook claude-code$")


def hook_command() -> str:
    """The hook command for the git-pf running now: its interpreter without ``site`` (``-S``) running
    the hook client's small start file (``claude_code_hook_main``), both by absolute path. ``site``
    (the installed packages' paths and ``.pth`` files, an editable install's finder) is two thirds of
    a bare Python start; the client needs none of it unless it handles the event itself
    (``claude_code_hook.full_path``). Commands naming ``claude_code_hook.py`` itself (earlier
    installs) still run and are still recognised as git-pf's."""
    main = os.path.join(os.path.dirname(os.path.abspath(__file__)), "hook_main.py")
    return f"{shlex.quote(sys.executable)} -S {shlex.quote(main)} hook claude-code"


def command_problem(command: str) -> str | None:
    """Why Claude Code could not run ``command`` (None: its program is there and executable)."""
    program = shlex.split(command)[0]
    found = program if os.sep in program else shutil.which(program)
    if not found or not os.access(found, os.X_OK):
        return f"'{program}' is not an executable Claude Code can find"
    return None


def config_dir() -> Path:
    """Claude Code's user configuration directory: ``$CLAUDE_CONFIG_DIR``, else ``~/.claude``."""
    configured = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(os.path.expanduser(configured)) if configured else Path(os.path.expanduser("~")) / ".claude"


def settings_path(repo, scope: str) -> Path:
    if scope == "user":
        return config_dir() / "settings.json"
    if scope != "project":
        raise UsageError(f"--scope must be one of {'|'.join(SCOPES)}, not '{scope}'")
    if not repo.git.workdir:
        raise UsageError("a bare repository has no project directory; use --scope user")
    return Path(repo.git.workdir) / ".claude" / "settings.json"


def _state_path(repo, scope: str) -> Path:
    if scope == "user":
        return config_dir() / "git-pf-install.json"
    return repo.git_dir / "pf" / "claude-code" / "install-project.json"


def _group(event: str, command: str) -> dict:
    group = {"hooks": [{"type": "command", "command": command}]}
    return {"matcher": "*", **group} if event in MATCHED else group


def _is_ours(hook, command: str | None = None) -> bool:
    """A hook entry git-pf wrote (``command``: that command exactly)."""
    if not isinstance(hook, dict) or hook.get("type") != "command" or not isinstance(hook.get("command"), str):
        return False
    return hook["command"] == command if command else bool(_OURS.match(hook["command"]))


def installed_commands(settings: dict) -> list[str]:
    """The git-pf hook commands a settings object holds, each once."""
    out = []
    for groups in (settings.get("hooks") or {}).values():
        for group in groups if isinstance(groups, list) else ():
            for hook in group.get("hooks") or () if isinstance(group, dict) else ():
                if _is_ours(hook) and hook["command"] not in out:
                    out.append(hook["command"])
    return out


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


def install(repo, scope: str = "project", command: str | None = None) -> dict:
    """Add the hook entries (an earlier git-pf command is replaced by this one); ``{"path", "scope",
    "added": [events], "command", "problem"}`` (added empty when all were there; problem: why Claude
    Code could not run the command, or None)."""
    command = command or hook_command()
    path = settings_path(repo, scope)
    before = _read(path)
    settings = _load(path, before)
    hooks = settings.setdefault("hooks", {})
    added = []
    for event in EVENTS:
        groups = hooks.setdefault(event, [])
        ours = [h for g in groups if isinstance(g, dict) for h in g.get("hooks") or [] if _is_ours(h)]
        wanted = RUN_GUARD + command if event in GUARDED else command
        if any(h["command"] == wanted for h in ours):
            continue
        if ours:
            ours[0]["command"] = wanted
        else:
            groups.append(_group(event, wanted))
        added.append(event)
    result = {"path": str(path), "scope": scope, "added": added, "command": command,
              "problem": command_problem(command)}
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
    command = None  # every entry git-pf wrote, whichever git-pf wrote it
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


def _remove_ours(settings: dict, command: str | None) -> list[str]:
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


def check(repo, scope: str = "project") -> dict:
    """Run a test event through each installed git-pf command as Claude Code runs a hook (``sh -c``,
    the event on stdin, from the project directory); ``{"path", "scope", "commands": [{"command",
    "ok", "detail"}], "ok"}``. A command that does not reach this repository's git-pf is not ok."""
    from .session import CHECK_EVENT

    path = settings_path(repo, scope)
    settings = _load(path, _read(path))
    root = repo.git.workdir or os.getcwd()
    event = json.dumps({"session_id": f"pf-check-{uuid.uuid4().hex[:12]}", "hook_event_name": CHECK_EVENT,
                        "cwd": str(root), "transcript_path": ""}).encode()
    env = dict(os.environ, CLAUDE_PROJECT_DIR=str(root))
    results = []
    for command in installed_commands(settings):
        if command.startswith(RUN_GUARD):
            continue  # runs only inside a recorded run; its program is the one checked beside it
        try:
            proc = subprocess.run(["sh", "-c", command], input=event, cwd=root, env=env, capture_output=True,
                                  timeout=CHECK_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            results.append({"command": command, "ok": False, "detail": f"no answer in {CHECK_TIMEOUT_S:.0f} s"})
            continue
        said = (proc.stderr or proc.stdout).decode("utf-8", "replace").strip().splitlines()
        ok = proc.returncode == 0 and b"claude-code hook: ok" in proc.stdout
        detail = "the hook answered" if ok else (said[0][:300] if said else f"exit {proc.returncode}, no output")
        results.append({"command": command, "ok": ok, "detail": detail})
    if not results:
        results.append({"command": None, "ok": False, "detail": f"no git-pf hook in {path} (run 'git pf install --claude-code')"})
    return {"path": str(path), "scope": scope, "commands": results, "ok": all(r["ok"] for r in results)}
