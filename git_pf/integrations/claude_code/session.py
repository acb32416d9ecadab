"""Claude Code sessions as image branches: what one hook event writes (docs/integrations.md).

A session is the branch ``cc/<session id>``. ``SessionStart`` writes its step 0
image (the project directory before the agent acts); each ``PostToolUse`` and
``PostToolUseFailure`` writes step N: the project directory (world), the
session's transcript turned into trace messages, and the tool call appended to
the effects ledger (Read, Grep, Glob pure, Write and Edit idempotent, Bash and
any other tool irreversible unless ``pf.claudeCode.<Tool>.sideEffect`` says
otherwise; a failed call with its error). Claude Code writes its transcript
after the hook may run, so a step waits briefly for the line naming its
``tool_use_id`` and completes its trace from the event itself, marking the
step (``Pf-Claude-Pending``) so that the next step or the final image carries
the call. ``UserPromptSubmit`` starts a turn (``Pf-Claude-Turn`` on each
image); ``Stop`` and ``SessionEnd`` write the turn's final image (the world,
the whole transcript, ``last_assistant_message``), tagged
``cc/<session id>/turn-<k>``. Claude Code's own settings files are left out
of the world (``WORLD_IGNORE``), so a rewind never writes hooks back.
``Sessions`` keeps what a long-lived process can keep warm between events (the
repository, each project's stat cache and directory watch, each transcript
read so far). Event data is untrusted: it is checked before use. Writes images,
the session's branch and its turn tags; never touches the project directory.
"""
from __future__ import annotations

import json
import os
import re
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ...core import config, secrets
from ...image import manifest as img, refs
from ...core.errors import InputFormatError, UsageError
from ...layers.effects import ledger as effects_mod
from ...layers.trace import messages as messages_mod
from ...runs.steps import RUN_END_TRAILER, STEP_TRAILER, step_of
from ...ops.snapshot import DirWorld, SnapshotRequest, take
from ...store.packfile import packing
from .effects import side_effect
from .hook import CHECK_EVENT, log_line, state_dir

BRANCH_PREFIX = "cc/"
SESSION_TRAILER = "Pf-Claude-Session"
AGENT = img.Agent("claude-code")
EVENTS = ("SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop", "SessionEnd")
TOOL_EVENTS = ("PostToolUse", "PostToolUseFailure")
TURN_TRAILER = "Pf-Claude-Turn"
PENDING_TRAILER = "Pf-Claude-Pending"  # tool calls whose trace came from the event, not yet from the transcript
# Claude Code's own settings (git-pf's hooks among them) are never part of a session's world
WORLD_IGNORE = ("/.claude/settings.json", "/.claude/settings.local.json")
TRANSCRIPT_WAIT_S = 0.2  # how long a step waits for the transcript line naming its tool call
MAX_TRANSCRIPT = 256 << 20  # a larger transcript is skipped (a long session's is a few MiB to tens of MiB)
ERROR_KEPT_CHARS = 4000
RESULT_KEPT_BYTES = 16 * 1024  # a larger tool response is kept in the ledger by its hash only
_SESSION_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_CALL_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,199}$")  # what a tool call id may be to go in a trailer


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
    try:
        return side_effect(tool, config.get_str(git, f"pf.claudeCode.{tool}.sideEffect") if tool else None)
    except ValueError as e:
        raise UsageError(str(e)) from None


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
    """Where a session's project directory, transcript path and current turn are remembered, for
    ``git pf rewind`` and the next event (this clone only)."""
    return Path(state_dir(git_dir), "sessions", f"{session_id}.json")


def session_record(git_dir: Path, session_id: str) -> dict:
    try:
        data = json.loads(root_record(git_dir, session_id).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _update_record(git_dir: Path, session_id: str, **values) -> dict:
    record = session_record(git_dir, session_id)
    if all(record.get(k) == v for k, v in values.items()):
        return record
    record.update(values)
    path = root_record(git_dir, session_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(record) + "\n")
    os.replace(tmp, path)
    return record


def turn_of(image: img.ImageInfo | None) -> int:
    values = image.trailer(TURN_TRAILER) if image is not None else ()
    return int(values[-1]) if values and values[-1].isdigit() else 0


class Transcript:
    """A session's transcript JSONL, read incrementally: only the bytes appended since the last read.

    The path comes from the event, so it is opened without blocking (a FIFO or a device there
    never waits for a writer) and read only when it is a regular file of at most
    ``MAX_TRANSCRIPT`` bytes; otherwise ``skipped`` says why and nothing is read."""

    def __init__(self, path: Path):
        self.path, self.offset, self.ident = path, 0, None
        self.messages: list[dict] = []
        self.skipped: str | None = None
        self._tail = b""

    def read(self) -> list[dict]:
        self.skipped = None
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            return self.messages
        except OSError as e:
            self.skipped = f"cannot be opened ({e.strerror})"
            return self.messages
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                self.skipped = "is not a regular file"
            elif st.st_size > MAX_TRANSCRIPT:
                self.skipped = f"is {st.st_size} bytes, over {MAX_TRANSCRIPT}"
            if self.skipped:
                return self.messages
            if (st.st_dev, st.st_ino) != self.ident or st.st_size < self.offset:
                self.ident, self.offset, self.messages, self._tail = (st.st_dev, st.st_ino), 0, [], b""
            f.seek(self.offset)
            data = f.read(st.st_size - self.offset)  # what is there now; a line appended since waits
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
    """The ledger entry of a ``PostToolUse`` or ``PostToolUseFailure`` event (its ``tool_use_id`` the
    idempotency key; a failed call has ``failed``, its ``error`` and whether it was ``interrupted``)."""
    name = event["hook_event_name"]
    tool = event.get("tool_name")
    if not isinstance(tool, str) or not tool:
        raise InputFormatError(f"a {name} event has no tool_name")
    key = event.get("tool_use_id")
    key = key if isinstance(key, str) and key else f"{event['session_id']}/step-{step}"
    failed = name == "PostToolUseFailure"
    entry = tool_effect(tool, event.get("tool_input"), None if failed else event.get("tool_response"), key,
                        side_effect_class(git, tool), step)
    if failed:
        error = event.get("error")
        error = error if isinstance(error, str) else json.dumps(error, default=str)
        entry.update(failed=True, error=secrets.redact_text(error)[:ERROR_KEPT_CHARS],
                     interrupted=event.get("is_interrupt") is True)
    return entry


def _call_ids(messages: list[dict]) -> tuple[set, set]:
    """(tool_use ids, tool_result ids) the messages hold."""
    uses, results = set(), set()
    for m in messages:
        content = m.get("content")
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_use":
                uses.add(block.get("id"))
            elif isinstance(block, dict) and block.get("type") == "tool_result":
                results.add(block.get("tool_use_id"))
    return uses, results


def complete_calls(messages: list[dict], calls: list[dict]) -> list[str]:
    """Append, from their ledger entries, the tool_use and tool_result of the calls the transcript
    does not hold yet; the ids of those completed so (the step's ``Pf-Claude-Pending``)."""
    uses, results = _call_ids(messages)
    pending = []
    for entry in calls:
        key = entry["idempotency_key"]
        if key in uses and key in results:
            continue
        pending.append(key)
        if key not in uses:
            messages.append({"role": "assistant", "content": [
                {"type": "tool_use", "id": key, "name": entry["tool"], "input": entry.get("args")}]})
        if key not in results:
            if entry.get("failed"):
                text = entry.get("error", "")
            elif "result" in entry:
                text = entry["result"] if isinstance(entry["result"], str) else json.dumps(entry["result"], ensure_ascii=False)
            else:
                text = f"(a result of {entry.get('result_bytes')} bytes, kept by its hash)"
            block = {"type": "tool_result", "tool_use_id": key, "content": text}
            if entry.get("failed"):
                block["is_error"] = True
            messages.append({"role": "user", "content": [block]})
    return pending


def _end_of(messages: list[dict], calls: list[dict], final: str | None) -> int:
    """How many of the transcript's messages belong to this step: up to the result of its own
    call (or to its final answer); the transcript, read after Claude Code went on, may hold more."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        content = m.get("content")
        if final is not None:
            if m.get("role") == "assistant" and _last_text([m]) == final:
                return i + 1
        elif calls:
            key = calls[-1]["idempotency_key"]
            if any(isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == key
                   for b in content if isinstance(content, list)):
                return i + 1
    return len(messages)


def _last_text(messages: list[dict]) -> str | None:
    for m in reversed(messages):
        if m.get("role") != "assistant":
            continue
        content = m.get("content")
        if isinstance(content, str):
            return content
        texts = [b.get("text") for b in content if isinstance(b, dict) and b.get("type") == "text"]
        return "".join(t for t in texts if isinstance(t, str)) if texts else None
    return None


class Sessions:
    """Handles hook events for one repository; warm state lives as long as the object."""

    def __init__(self, repo, *, live: bool = False, pause=None):
        self.repo = repo
        self.live = live  # a long-lived process: keep each project's stat cache and watch in memory
        # pause(seconds) -> True when another event is waiting (the server's): a step stops waiting
        # for its transcript line then, and the next step completes its trace
        self.pause = pause or (lambda seconds: time.sleep(seconds) or False)
        self._worlds: dict[tuple[bytes, tuple], object] = {}
        self._transcripts: dict[str, Transcript] = {}
        self._answer = None

    def handle(self, event: dict, project_dir: str | None = None, answer=None) -> Outcome:
        """Handle one event. ``answer()``, when given, is called as soon as Claude Code may go on:
        once the event's world is captured (the transcript read, the image and the ref come after;
        the next event is handled only when they are written)."""
        self._answer = answer
        try:
            return self._handle(event, project_dir)
        finally:
            self._answer = None  # not answered yet: the caller answers with the outcome

    def _answered(self) -> None:
        answer, self._answer = self._answer, None
        if answer is not None:
            answer()

    def _handle(self, event: dict, project_dir: str | None) -> Outcome:
        name = event["hook_event_name"]
        branch = session_branch(event["session_id"])
        if name == "SessionStart":
            return self._start(event, branch, project_dir)
        if name in TOOL_EVENTS:
            return self._tool(event, branch, project_dir)
        if name in ("Stop", "SessionEnd"):
            return self._final(event, branch, project_dir)
        if name == "UserPromptSubmit":
            return self._prompt(event, branch)
        if name == CHECK_EVENT:  # git pf install --claude-code --check: the hook reached this repository
            return Outcome("checked", branch, detail=str(self.repo.git_dir))
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

    def _prompt(self, event: dict, branch: str) -> Outcome:
        git, sid = self.repo.git, event["session_id"]
        tip = refs.branch_tip(git, branch)
        current = max(session_record(self.repo.git_dir, sid).get("turn") or 0,
                      turn_of(img.read_image(git, tip)) if tip else 0)
        _update_record(self.repo.git_dir, sid, turn=current + 1)
        return Outcome("turn", branch, tip, detail=f"turn {current + 1}")

    def _tool(self, event: dict, branch: str, project_dir: str | None) -> Outcome:
        git = self.repo.git
        tip = refs.branch_tip(git, branch)
        parent = img.read_image(git, tip) if tip else None
        step = (step_of(parent) or 0) + 1 if parent else 1
        ledger = self._ledger(parent)
        entry = effect_entry(git, event, step)
        ledger = ledger + [entry]
        calls = self._pending(parent, ledger[:-1]) + [entry]
        what = "failed" if entry.get("failed") else "step"
        image = self._write(event, branch, project_dir, step, parent, ledger, f"step {step}: {entry['tool'][:60]}"
                            + (" (failed)" if entry.get("failed") else ""), calls=calls)
        return Outcome(what, branch, image.id, step)

    def _final(self, event: dict, branch: str, project_dir: str | None) -> Outcome:
        """The turn's final image (the world, the whole transcript, the last assistant message), tagged."""
        git, sid = self.repo.git, event["session_id"]
        tip = refs.branch_tip(git, branch)
        if tip is None:
            return Outcome("skipped", branch, detail="no image for this session yet")
        parent = img.read_image(git, tip)
        record = session_record(self.repo.git_dir, sid)
        tags = refs.list_refs(git, refs.TAGS + branch + "/turn-")
        numbers = sorted(int(k) for k in tags if k.isdigit())
        turn = record.get("turn") if isinstance(record.get("turn"), int) and record.get("turn") > 0 else \
            (numbers[-1] if numbers and tags[str(numbers[-1])] == tip else (numbers[-1] if numbers else 0) + 1)
        last = event.get("last_assistant_message")
        step = step_of(parent) or 0
        ended = bool(parent.trailer(RUN_END_TRAILER))
        # SessionEnd after Stop: the final image has the whole turn; a new one only when the world changed since
        keep = ended and last is None and not parent.trailer(PENDING_TRAILER)
        image = self._write(event, branch, project_dir, step, parent, None, f"{event['hook_event_name']}: "
                            f"end of turn {turn}", calls=self._pending(parent, self._ledger(parent)),
                            final=last if isinstance(last, str) else None, turn=turn,
                            more=((RUN_END_TRAILER, "0"),), allow_empty=not ended, trace=not keep)
        name = f"{branch}/turn-{turn}"
        full = refs.TAGS + refs.check_name(name, "tag")
        if git.references.get(full) is None:
            self.repo.create_tag(name, image.id)
        elif tags.get(str(turn)) != image.id:
            git.references.create(full, image.id, force=True)
        if "turn" not in record:
            _update_record(self.repo.git_dir, sid, turn=turn)
        return Outcome("final", branch, image.id, step, name)

    # -- writing ------------------------------------------------------------
    def _ledger(self, parent) -> list[dict]:
        data = img.read_file(self.repo.git, parent.tree, img.EFFECTS_LEDGER) if parent else None
        return effects_mod.decode(data) if data else []

    @staticmethod
    def _pending(parent, ledger: list[dict]) -> list[dict]:
        """The ledger entries of the calls the parent's trace completed from its events."""
        ids = set(parent.trailer(PENDING_TRAILER)[-1].split(",")) if parent and parent.trailer(PENDING_TRAILER) else set()
        return [e for e in ledger if e.get("idempotency_key") in ids]

    def _write(self, event, branch, project_dir, step, parent, ledger, subject, *, calls=(), final=None,
               turn=None, more=(), allow_empty=True, trace=True) -> img.ImageInfo:
        """Capture the world, answer, then read the transcript and write the image and the ref
        (``trace=False``: the parent's trace as it is)."""
        root = project_root(self.repo, event, project_dir)
        sid = event["session_id"]
        path = event.get("transcript_path")
        record = _update_record(self.repo.git_dir, sid, root=os.path.abspath(root),
                                **({"transcript": path} if isinstance(path, str) and path else {}))
        git = self.repo.git
        world = self._world(root)
        with packing(git) as pack:  # its objects go into the image's pack
            cap = world.capture(self.repo, parent)
        self._answered()  # the project as it is now is captured: Claude Code may go on
        messages, pending = self._messages(event, list(calls), final) if trace else (None, [])
        turn = turn if turn is not None else (record.get("turn") or 0)
        trailers = [(STEP_TRAILER, str(step)), (SESSION_TRAILER, sid), (TURN_TRAILER, str(turn)), *more]
        pending = [key for key in pending if _CALL_ID.match(key)]  # event data: no odd id reaches a trailer
        if pending:
            trailers.append((PENDING_TRAILER, ",".join(pending)))
        from ...runs.stepworld import Given

        req = SnapshotRequest(root, branch=branch, agent=AGENT, messages=messages, effects=ledger, message=subject,
                              allow_empty=allow_empty, world=Given(cap, world.name),
                              parent=parent.id if parent else None, trailers=tuple(trailers))
        with packing(git, pack):
            image = take(self.repo, req).image
        world.done(cap)
        return image

    def _world(self, root: Path):
        ignore: tuple[str, ...] = WORLD_IGNORE
        if not self.live:
            return DirWorld(self.repo, root, ignore)
        from ...runs.stepworld import LiveWorld

        key = (os.fsencode(os.path.realpath(root)), ignore)
        if key not in self._worlds:
            self._worlds[key] = LiveWorld(self.repo, root, ignore)
        return self._worlds[key]

    def _messages(self, event: dict, calls: list[dict], final: str | None) -> tuple[list[dict] | None, list[str]]:
        """The transcript's messages, completed with the calls it does not hold yet and the final
        answer (None, keeping the parent's, when the event names no transcript); the completed ids.
        Waits up to ``TRANSCRIPT_WAIT_S`` for the newest call's tool_use (or the final answer)."""
        path = event.get("transcript_path")
        if not isinstance(path, str) or not path:
            return None, []
        reader = self._transcripts.get(path) if self.live else None
        if reader is None:
            reader = Transcript(Path(os.path.expanduser(path)))
            if self.live:
                self._transcripts[path] = reader

        def arrived(messages) -> bool:
            if final is not None:
                return _last_text(messages) == final
            return not calls or calls[-1]["idempotency_key"] in _call_ids(messages)[0]

        deadline = time.monotonic() + TRANSCRIPT_WAIT_S
        found = reader.read()
        while not reader.skipped and not arrived(found) and time.monotonic() < deadline:
            if self.pause(0.01):  # the next event is here: it goes on from what this step has
                found = reader.read()
                break
            found = reader.read()
        if reader.skipped:  # the trace stays the parent's; the step is written all the same
            log_line(str(self.repo.git_dir), f"{event.get('hook_event_name')} {event.get('session_id')}",
                     f"transcript skipped: {path[:300]!r} {reader.skipped}")
            return None, []
        messages = [dict(m) for m in found[:_end_of(found, calls, final)]]
        pending = complete_calls(messages, calls)
        if final is not None and _last_text(messages) != final:
            messages.append({"role": "assistant", "content": [{"type": "text", "text": secrets.redact_text(final)}]})
        messages_mod.encode(messages)  # a message canonical JSON cannot hold fails here, not mid-write
        return messages, pending
