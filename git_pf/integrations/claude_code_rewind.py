"""``git pf rewind``: put a Claude Code project directory back as it was at a session's step.

The step's image holds the whole project directory as the hook captured it
after that tool call, so a rewind covers what shell commands changed too.
``plan`` captures the directory as it is now (the same capture a snapshot
makes, with the same ignore rules) and lists the files to write and to
remove; ``apply`` writes the step's files into a temporary sibling directory
first, then moves each into place and removes the rest, so a missing or
corrupt object fails before the directory is touched. Ignored files and the
git directory are never touched; nothing is written through a symlink.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import image as img, refs, safepath, siblings
from ..errors import UsageError
from ..layers.world.restore import iter_world, restore
from ..runs.steps import at_step
from ..snapshot import DirWorld
from .claude_code import BRANCH_PREFIX, root_record


@dataclass
class RewindPlan:
    session: str
    step: int
    image: img.ImageInfo
    root: Path
    write: list[bytes] = field(default_factory=list)  # paths (relative, as bytes) added or changed
    remove: list[bytes] = field(default_factory=list)
    world: safepath.World | None = None

    @property
    def empty(self) -> bool:
        return not self.write and not self.remove

    def to_json(self) -> dict:
        return {"session": self.session, "step": self.step, "image": self.image.id, "path": str(self.root),
                "write": [os.fsdecode(p) for p in self.write], "remove": [os.fsdecode(p) for p in self.remove]}


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


def plan(repo, session: str | None, step: int, into: str | os.PathLike | None) -> RewindPlan:
    git = repo.git
    sid = session.removeprefix(BRANCH_PREFIX) if session else latest_session(git)
    branch = BRANCH_PREFIX + sid
    if refs.branch_tip(git, refs.check_name(branch)) is None:
        raise UsageError(f"no Claude Code session '{sid}' (its branch {branch} does not exist)")
    image = img.read_image(git, at_step(git, branch, step))
    root = Path(into) if into is not None else _recorded_root(repo.git_dir, sid)
    if root is None:
        raise UsageError(f"the project directory of session '{sid}' is not known here; name it with --into")
    root = Path(os.path.abspath(root))
    if not root.is_dir():
        raise UsageError(f"'{root}' is not a directory", param="into")
    world = safepath.validate_image(git, image.tree)
    want = {path: (mode, oid) for path, mode, oid in world.entries}
    source = DirWorld(repo, root, ())
    cap = source.capture(repo, None)
    source.done(cap)
    have = {path: (mode, oid) for path, mode, oid in iter_world(git, bytes.fromhex(cap.tree))}
    out = RewindPlan(sid, step, image, root, world=world)
    out.write = sorted(p for p, v in want.items() if have.get(p) != v)
    out.remove = sorted(p for p in have if p not in want)
    return out


def apply(repo, p: RewindPlan) -> None:
    """Make the directory hold the step's files: the changed ones written, the extra ones removed."""
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
