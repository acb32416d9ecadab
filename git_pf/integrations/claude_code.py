"""Claude Code sessions as image branches: what one hook event writes (docs/integrations.md).

A session is the branch ``cc/<session id>``. ``SessionStart`` writes its step 0
image (the project directory before the agent acts); each ``PostToolUse``
writes step N: the project directory (world), the session's transcript turned
into trace messages, and the tool call appended to the effects ledger (Read,
Grep, Glob pure, Write and Edit idempotent, Bash and any other tool
irreversible unless ``pf.claudeCode.<Tool>.sideEffect`` says otherwise).
``Stop`` tags the session's last image ``cc/<session id>/turn-<k>``.
``Sessions`` keeps what a long-lived process can keep warm between events (the
repository, each project's stat cache and directory watch, each transcript
read so far). Event data is untrusted: it is checked before use. Writes images,
the session's branch and its turn tags; never touches the project directory.
"""
from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from .. import config, image as img, refs, secrets
from ..errors import InputFormatError, UsageError
from ..layers.effects import ledger as effects_mod
from ..layers.trace import messages as messages_mod
from ..runs.steps import STEP_TRAILER, step_of
from ..snapshot import DirWorld, SnapshotRequest, take
from .claude_code_hook import state_dir

BRANCH_PREFIX = "cc/"
SESSION_TRAILER = "Pf-Claude-Session"
AGENT = img.Agent("claude-code")
EVENTS = ("SessionStart", "PostToolUse", "Stop")
DEFAULT_CLASSES = {
    **dict.fromkeys(("Read", "Grep", "Glob", "LS", "NotebookRead", "WebFetch", "WebSearch", "TodoWrite",
                     "BashOutput"), "pure"),
    **dict.fromkeys(("Write", "Edit", "MultiEdit", "NotebookEdit"), "idempotent"),
}
RESULT_KEPT_BYTES = 16 * 1024  # a larger tool response is kept in the ledger by its hash only
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True)
class Outcome:
    """What one event did: ``action`` (started, step, tagged, skipped), the branch, the image id."""

    action: str
    branch: str
    image: str | None = None
    step: int | None = None
    detail: str = ""

    def to_json(self) -> dict:
        return {"action": self.action, "branch": self.branch, "image": self.image, "step": self.step,
                "detail": self.detail}


def parse_event(data: bytes) -> dict:
    """The hook event on stdin, checked: an object with a valid ``session_id`` and ``hook_event_name``."""
    try:
        event = json.loads(data)
    except (ValueError, UnicodeDecodeError) as e:
        raise InputFormatError(f"the hook event is not JSON: {e}") from None
    if not isinstance(event, dict):
        raise InputFormatError("the hook event is not a JSON object")
    sid = event.get("session_id")
    if not isinstance(sid, str) or not _SESSION_ID.match(sid) or ".." in sid or sid.endswith((".", ".lock")):
        raise InputFormatError(f"the hook event has no usable session_id: {str(sid)[:80]!r}")
    if not isinstance(event.get("hook_event_name"), str):
        raise InputFormatError("the hook event has no hook_event_name")
    return event


def session_branch(session_id: str) -> str:
    return refs.check_name(BRANCH_PREFIX + session_id)


def side_effect_class(git, tool: str) -> str:
    """``pf.claudeCode.<tool>.sideEffect`` when set, else the default for the tool (irreversible)."""
    value = config.get_str(git, f"pf.claudeCode.{tool}.sideEffect") if tool else None
    if value is None:
        return DEFAULT_CLASSES.get(tool, "irreversible")
    if value not in effects_mod.CLASSES:
        raise UsageError(f"pf.claudeCode.{tool}.sideEffect must be one of {'|'.join(effects_mod.CLASSES)}, "
                         f"not {value!r}")
    return value


def project_root(repo, event: dict, project_dir: str | None) -> Path:
    """The directory a session's world is: ``$CLAUDE_PROJECT_DIR``, else the repository's work
    tree, else the event's ``cwd``."""
    if project_dir:
        return Path(project_dir)
    if repo.git.workdir:
        return Path(repo.git.workdir)
    cwd = event.get("cwd")
    if isinstance(cwd, str) and os.path.isabs(cwd):
        return Path(cwd)
    raise UsageError("no project directory: set CLAUDE_PROJECT_DIR or run in a work tree")


def root_record(git_dir: Path, session_id: str) -> Path:
    """Where the project directory of a session is remembered, for ``git pf rewind`` (this clone only)."""
    return Path(state_dir(git_dir), "sessions", f"{session_id}.json")


def _remember_root(git_dir: Path, session_id: str, root: Path) -> None:
    path = root_record(git_dir, session_id)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"root": os.path.abspath(root)}) + "\n")


class Transcript:
    """A session's transcript JSONL, read incrementally: only the bytes appended since the last read."""

    def __init__(self, path: Path):
        self.path, self.offset, self.ident = path, 0, None
        self.messages: list[dict] = []
        self._tail = b""

    def read(self) -> list[dict]:
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.offset:
                    self.ident, self.offset, self.messages, self._tail = (st.st_dev, st.st_ino), 0, [], b""
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return self.messages
        self.offset += len(data)
        lines = (self._tail + data).split(b"\n")
        self._tail = lines.pop()  # an unfinished last line waits for the next read
        for line in lines:
            add_transcript_line(self.messages, line)
        return self.messages


def add_transcript_line(messages: list[dict], line: bytes) -> None:
    """Append the trace message one transcript line holds (a user or assistant entry with a
    ``message``); other lines (summaries, system notes, side chains, bad JSON) add nothing. An
    assistant message written as several lines (one per content block, one ``message.id``) is one."""
    try:
        entry = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return
    if not isinstance(entry, dict) or entry.get("type") not in ("user", "assistant") or entry.get("isSidechain"):
        return
    message = entry.get("message")
    if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
        return
    content = message.get("content")
    if not isinstance(content, (str, list)):
        return
    out = {"role": message["role"], "content": secrets.redact_json(content)}
    mid = message.get("id")
    last = messages[-1] if messages else None
    if mid and last and last.get("id") == mid and isinstance(last["content"], list) and isinstance(content, list):
        last["content"] = last["content"] + out["content"]
        return
    if isinstance(mid, str):
        out["id"] = mid
    messages.append(out)


def tool_effect(tool: str, args, result, key: str, side_effect: str, step: int, keep: frozenset[str] = frozenset()) -> dict:
    """A ledger entry for one tool call of an agent framework: args and result redacted, a
    result over ``RESULT_KEPT_BYTES`` kept by its hash only (``result_bytes`` says how large)."""
    args = secrets.redact_json(args, keep)
    result = secrets.redact_json(result, keep)
    entry = {"ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "tool": tool, "args": args,
             "idempotency_key": key, "side_effect_class": side_effect, "step": step}
    size = len(json.dumps(result, ensure_ascii=False, default=str))
    if size <= RESULT_KEPT_BYTES:
        entry["result"] = result
    else:
        entry.update(result_hash=effects_mod.value_hash(result), result_bytes=size)
    return entry


def effect_entry(git, event: dict, step: int) -> dict:
    """The ledger entry of a ``PostToolUse`` event (its ``tool_use_id`` the idempotency key)."""
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise InputFormatError("a PostToolUse event has no tool_name")
    key = event.get("tool_use_id")
    key = key if isinstance(key, str) and key else f"{event['session_id']}/step-{step}"
    return tool_effect(tool, event.get("tool_input"), event.get("tool_response"), key, side_effect_class(git, tool), step)


class Sessions:
    """Handles hook events for one repository; warm state lives as long as the object."""

    def __init__(self, repo, *, live: bool = False):
        self.repo = repo
        self.live = live  # a long-lived process: keep each project's stat cache and watch in memory
        self._worlds: dict[tuple[bytes, tuple], object] = {}
        self._transcripts: dict[str, Transcript] = {}

    def handle(self, event: dict, project_dir: str | None = None) -> Outcome:
        name = event["hook_event_name"]
        branch = session_branch(event["session_id"])
        if name == "SessionStart":
            return self._start(event, branch, project_dir)
        if name == "PostToolUse":
            return self._tool(event, branch, project_dir)
        if name == "Stop":
            return self._stop(branch)
        return Outcome("skipped", branch, detail=f"event {name} is not one git-pf handles")

    def close(self) -> None:
        for world in self._worlds.values():
            world.save()
        self._worlds.clear()

    # -- events -----------------------------------------------------------
    def _start(self, event: dict, branch: str, project_dir: str | None) -> Outcome:
        tip = refs.branch_tip(self.repo.git, branch)
        if tip is not None:  # resumed, cleared or compacted: the session goes on on its branch
            return Outcome("skipped", branch, tip, step_of(img.read_image(self.repo.git, tip)), "session resumed")
        source = event.get("source") if isinstance(event.get("source"), str) else "startup"
        image = self._write(event, branch, project_dir, 0, None, None, f"session start ({source[:40]})")
        return Outcome("started", branch, image.id, 0)

    def _tool(self, event: dict, branch: str, project_dir: str | None) -> Outcome:
        git = self.repo.git
        tip = refs.branch_tip(git, branch)
        parent = img.read_image(git, tip) if tip else None
        step = (step_of(parent) or 0) + 1 if parent else 1
        data = img.read_file(git, parent.tree, img.EFFECTS_LEDGER) if parent else None
        ledger = effects_mod.decode(data) if data else []
        entry = effect_entry(git, event, step)
        ledger = ledger + [entry]
        image = self._write(event, branch, project_dir, step, parent, ledger, f"step {step}: {entry['tool'][:60]}")
        return Outcome("step", branch, image.id, step)

    def _stop(self, branch: str) -> Outcome:
        git = self.repo.git
        tip = refs.branch_tip(git, branch)
        if tip is None:
            return Outcome("skipped", branch, detail="no image for this session yet")
        tags = refs.list_refs(git, refs.TAGS + branch + "/turn-")
        numbers = sorted(int(k) for k in tags if k.isdigit())
        if numbers and tags[str(numbers[-1])] == tip:
            return Outcome("skipped", branch, tip, detail="the last image is tagged already")
        name = f"{branch}/turn-{(numbers[-1] if numbers else 0) + 1}"
        self.repo.create_tag(name, tip)
        return Outcome("tagged", branch, tip, step_of(img.read_image(git, tip)), name)

    # -- writing ------------------------------------------------------------
    def _write(self, event, branch, project_dir, step, parent, ledger, subject) -> img.ImageInfo:
        root = project_root(self.repo, event, project_dir)
        _remember_root(self.repo.git_dir, event["session_id"], root)
        messages = self._messages(event)
        req = SnapshotRequest(root, branch=branch, agent=AGENT, messages=messages, effects=ledger, message=subject,
                              allow_empty=True, world=self._world(root), parent=parent.id if parent else None,
                              trailers=((STEP_TRAILER, str(step)), (SESSION_TRAILER, event["session_id"])))
        return take(self.repo, req).image

    def _world(self, root: Path):
        ignore: tuple[str, ...] = ()
        if not self.live:
            return DirWorld(self.repo, root, ignore)
        from ..runs.stepworld import LiveWorld

        key = (os.fsencode(os.path.realpath(root)), ignore)
        if key not in self._worlds:
            self._worlds[key] = LiveWorld(self.repo, root, ignore)
        return self._worlds[key]

    def _messages(self, event: dict) -> list[dict] | None:
        """The transcript's messages (None, keeping the parent's, when the event names no transcript)."""
        path = event.get("transcript_path")
        if not isinstance(path, str) or not path:
            return None
        reader = self._transcripts.get(path) if self.live else None
        if reader is None:
            reader = Transcript(Path(os.path.expanduser(path)))
            if self.live:
                self._transcripts[path] = reader
        messages = [dict(m) for m in reader.read()]
        messages_mod.encode(messages)  # a message canonical JSON cannot hold fails here, not mid-write
        return messages
