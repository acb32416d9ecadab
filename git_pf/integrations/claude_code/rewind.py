"""``git pf rewind``: put a Claude Code project directory, its conversation or both back as they were
at a session's step or turn.

The step's image holds the whole project directory as the hook captured it
after that tool call, so a rewind covers what shell commands changed too.
``plan`` captures the directory as it is now (the same capture a snapshot
makes, with the same ignore rules) and lists the files to write and to
remove; ``apply`` writes the step's files into a temporary sibling directory
first, then moves each into place and removes the rest, so a missing or
corrupt object fails before the directory is touched. Ignored files and the
git directory are never touched, nor Claude Code's settings files
(``claude_code.WORLD_IGNORE``: git-pf's own hooks are never written back);
nothing is written through a symlink. The conversation is the session's
transcript file, cut after the step's tool result (or at the end of the
turn), so ``claude --resume <session>`` goes on from there; the lines cut are
kept beside the session's record, so a later rewind can reach a later step.
A rewind first waits for the repository's hook server to have written every
event it was sent (``claude_code_hook.sync``).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...image import manifest as img, refs, safepath, verify
from ...core import siblings
from ...core.errors import UsageError
from ...layers.world.restore import iter_world, restore
from ...layers.effects import ledger as effects_mod
from ...runs.steps import at_step, step_of
from ...ops.snapshot import DirWorld
from .session import BRANCH_PREFIX, WORLD_IGNORE, root_record, session_record
from .hook import sync

SCOPES = ("code", "conversation", "both")


@dataclass
class RewindPlan:
    session: str
    step: int
    image: img.ImageInfo
    root: Path
    write: list[bytes] = field(default_factory=list)  # paths (relative, as bytes) added or changed
    remove: list[bytes] = field(default_factory=list)
    world: safepath.World | None = None
    turn: int | None = None
    transcript: Path | None = None  # the transcript to write back (scope conversation or both)
    conversation: bytes | None = None  # what it will hold
    scope: str = "code"

    @property
    def empty(self) -> bool:
        return not self.write and not self.remove and not (self.scope != "code" and self.conversation_changes)

    @property
    def conversation_changes(self) -> bool:
        return self.transcript is not None and _read(self.transcript) != self.conversation

    def to_json(self) -> dict:
        return {"session": self.session, "step": self.step, "turn": self.turn, "image": self.image.id,
                "scope": self.scope, "path": str(self.root), "write": [os.fsdecode(p) for p in self.write],
                "remove": [os.fsdecode(p) for p in self.remove],
                "transcript": str(self.transcript) if self.transcript else None,
                "transcript_lines": None if self.conversation is None else self.conversation.count(b"\n")}


def _recorded_root(git_dir: Path, session_id: str) -> Path | None:
    try:
        data = json.loads(root_record(git_dir, session_id).read_text())
    except (OSError, ValueError):
        return None
    root = data.get("root") if isinstance(data, dict) else None
    return Path(root) if isinstance(root, str) else None


def latest_session(git) -> str:
    """The session whose branch has the newest image."""
    best = None
    for name, oid in refs.list_refs(git, refs.HEADS + BRANCH_PREFIX).items():
        when = git[oid].commit_time
        if best is None or when > best[0]:
            best = (when, name)
    if best is None:
        raise UsageError("no Claude Code session in this repository (install the hooks: git pf install --claude-code)")
    return best[1]


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _at_turn(git, branch: str, turn: int) -> str:
    if turn == 0:
        return at_step(git, branch, 0)
    tip = refs.ref_tip(git, refs.TAGS + refs.check_name(f"{branch}/turn-{turn}", "tag"))
    if tip is None:
        raise UsageError(f"session {branch} has no turn {turn} (each ended turn is a tag {branch}/turn-<k>)")
    return tip


def plan(repo, session: str | None, step: int | None, into: str | os.PathLike | None, *, turn: int | None = None,
         scope: str = "code") -> RewindPlan:
    git = repo.git
    if scope not in SCOPES:
        raise UsageError(f"--scope must be one of {'|'.join(SCOPES)}, not '{scope}'")
    if (step is None) == (turn is None):
        raise UsageError("name one of --to-step N and --to-turn N")
    sync(str(repo.git_dir))  # the hook server's last step may still be being written
    sid = session.removeprefix(BRANCH_PREFIX) if session else latest_session(git)
    branch = BRANCH_PREFIX + sid
    if refs.branch_tip(git, refs.check_name(branch)) is None:
        raise UsageError(f"no Claude Code session '{sid}' (its branch {branch} does not exist)")
    image = img.read_image(git, at_step(git, branch, step) if turn is None else _at_turn(git, branch, turn))
    verify.check_use(git, image.id, branch)
    step = step_of(image) or 0
    out = RewindPlan(sid, step, image, Path("."), turn=turn, scope=scope)
    if scope != "code":
        out.transcript, out.conversation = _conversation(repo, sid, image, step, turn)
    if scope == "conversation":
        return out
    root = Path(into) if into is not None else _recorded_root(repo.git_dir, sid)
    if root is None:
        raise UsageError(f"the project directory of session '{sid}' is not known here; name it with --into")
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise UsageError(f"'{root}' is not a directory", param="into")
    world = safepath.validate_image(git, image.tree)
    kept = {os.fsencode(p.lstrip("/")) for p in WORLD_IGNORE}  # an image taken before they were left out
    want = {path: (mode, oid) for path, mode, oid in world.entries if path not in kept}
    source = DirWorld(repo, root, WORLD_IGNORE)
    cap = source.capture(repo, None)
    source.done(cap)
    have = {path: (mode, oid) for path, mode, oid in iter_world(git, bytes.fromhex(cap.tree))}
    out.root, out.world = root, world
    out.write = sorted(p for p, v in want.items() if have.get(p) != v)
    out.remove = sorted(p for p in have if p not in want)
    return out


def _is_prompt(entry: dict) -> bool:
    """A transcript line that is a prompt the user typed (not a tool result, not a meta note)."""
    if entry.get("type") != "user" or entry.get("isSidechain") or entry.get("isMeta"):
        return False
    content = (entry.get("message") or {}).get("content") if isinstance(entry.get("message"), dict) else None
    return isinstance(content, str) or (isinstance(content, list) and not any(
        isinstance(b, dict) and b.get("type") == "tool_result" for b in content))


def _cut(data: bytes, step: int, key: str | None, turn: int | None) -> bytes | None:
    """The transcript's lines up to the step's tool result (or to the end of turn ``turn``); None when
    the transcript does not reach that point."""
    lines = data.splitlines(keepends=True)
    prompts = 0
    for n, line in enumerate(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if turn is not None and _is_prompt(entry):
            prompts += 1
            if prompts == turn + 1:
                return b"".join(lines[:n])
        content = (entry.get("message") or {}).get("content") if isinstance(entry.get("message"), dict) else None
        if turn is None and isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" and b.get("tool_use_id") == key for b in content):
            return b"".join(lines[:n + 1])
    return data if turn is not None and prompts >= turn else None


def _conversation(repo, sid: str, image, step: int, turn: int | None) -> tuple[Path, bytes]:
    if turn is None and step == 0 or turn == 0:
        raise UsageError("the session's start has no conversation to resume; rewind it with --scope code")
    path = session_record(repo.git_dir, sid).get("transcript")
    if not isinstance(path, str):
        raise UsageError(f"the transcript of session '{sid}' is not known here")
    path = Path(os.path.expanduser(path))
    if path.name != f"{sid}.jsonl":  # the path came from a hook event: write back nothing but the session's own
        raise UsageError(f"'{path}' is not the transcript of session '{sid}' (its name is not {sid}.jsonl)")
    key = None
    if turn is None:
        data = img.read_file(repo.git, image.tree, img.EFFECTS_LEDGER)
        mine = [e for e in (effects_mod.decode(data) if data else []) if e.get("step") == step]
        if not mine:
            raise UsageError(f"step {step} of session '{sid}' has no tool call in its ledger")
        key = mine[-1]["idempotency_key"]
    for source in (_read(path), _read(_kept(repo, sid))):
        cut = _cut(source, step, key, turn) if source is not None else None
        if cut:
            return path, cut
    raise UsageError(f"the transcript {path} no longer reaches {'step' if turn is None else 'turn'} "
                     f"{step if turn is None else turn}")


def _kept(repo, sid: str) -> Path:
    return root_record(repo.git_dir, sid).with_suffix(".jsonl")


def write_conversation(repo, p: RewindPlan) -> None:
    """Write the transcript back; the lines it had are kept first (the longest version seen)."""
    now = _read(p.transcript) or b""
    kept = _kept(repo, p.session)
    before = _read(kept) or b""
    if len(now) > len(before):
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_bytes(now)
    tmp = p.transcript.with_name(f".{p.transcript.name}.pf-tmp")
    tmp.write_bytes(p.conversation)
    if p.transcript.exists():
        os.chmod(tmp, p.transcript.stat().st_mode & 0o7777)
    os.replace(tmp, p.transcript)


def apply(repo, p: RewindPlan) -> None:
    """Make the directory hold the step's files: the changed ones written, the extra ones removed;
    then the conversation, when its scope says so."""
    if p.scope != "code" and p.conversation_changes:
        write_conversation(repo, p)
    if p.scope == "conversation":
        return
    want = set(p.write)
    subset = safepath.World([e for e in p.world.entries if e[0] in want], p.world.kinds, p.world.attrs)
    root = os.fsencode(p.root)
    real_root = os.path.realpath(root)
    tmp = siblings.make(p.root, "checkout", repo.git_dir)
    try:
        restore(repo.git, repo.store, subset, os.fsencode(tmp))  # every object read before the directory changes
        for rel in p.remove:
            _inside(real_root, root, rel)
            os.unlink(os.path.join(root, rel))
            _prune(root, os.path.dirname(rel), p.world.kinds)
        for rel in p.write:
            target = os.path.join(root, rel)
            _make_parents(real_root, root, rel)
            if os.path.isdir(target) and not os.path.islink(target):
                raise UsageError(f"cannot rewind '{os.fsdecode(rel)}': a directory is in the way")
            os.replace(os.path.join(os.fsencode(tmp), rel), target)
        for rel, kind in p.world.kinds.items():
            if kind == safepath.DIR:
                _make_parents(real_root, root, os.path.join(rel, b"x"))
    finally:
        siblings.drop(tmp, repo.git_dir)


def _inside(real_root: bytes, root: bytes, rel: bytes) -> None:
    """Refuse a path whose parent leads out of the directory through a symlink."""
    parent = os.path.realpath(os.path.join(root, os.path.dirname(rel)))
    if parent != real_root and not parent.startswith(real_root + b"/"):
        raise UsageError(f"cannot rewind '{os.fsdecode(rel)}': its directory is a symlink out of the project")


def _make_parents(real_root: bytes, root: bytes, rel: bytes) -> None:
    _inside(real_root, root, rel)
    parent = os.path.dirname(rel)
    if parent:
        os.makedirs(os.path.join(root, parent), exist_ok=True)


def _prune(root: bytes, rel_dir: bytes, kinds: dict) -> None:
    """Remove the directories a removal left empty, up to the root, unless the step has them."""
    while rel_dir and kinds.get(rel_dir) is None:
        try:
            os.rmdir(os.path.join(root, rel_dir))
        except OSError:
            return
        rel_dir = os.path.dirname(rel_dir)
