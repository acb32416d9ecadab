"""Running git's own tree merge (``git merge-tree --write-tree``) on image worlds.

git merges commits, so each image gets a stand-in commit whose tree is its
``world/fs``. With one merge base, three commits suffice (base, and ours and
theirs on top of it). With several (criss-cross), the image history reachable
from both sides is mirrored commit by commit, with the same parents, authors,
dates and messages, so git builds its virtual merge base exactly as it would
for real commits holding those trees. Writes only unreferenced git objects.
"""
from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field

import pygit2

from ...image import manifest as img
from ...core.errors import PfError
from ...image.tree import MODE_TREE, TreeWriter, lookup

_STAGE = re.compile(rb"^([0-7]{6}) ([0-9a-f]{40,64}) ([123])\t(.*)$", re.S)
_SIG = pygit2.Signature("git-pf", "git-pf@localhost", 0, 0)


@dataclass
class Stage:
    mode: int
    oid: str
    stage: int  # 1 base, 2 ours, 3 theirs
    path: bytes  # tree path (escaped names), relative to world/fs


@dataclass
class Message:
    paths: list[bytes]
    kind: str  # git's type, e.g. "CONFLICT (contents)", "Auto-merging"
    text: str


@dataclass
class TreeMerge:
    tree: str
    clean: bool
    stages: list[Stage] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)


def spawn(git_dir, args: list[str]) -> subprocess.Popen:
    try:
        return subprocess.Popen(["git", "--git-dir", str(git_dir), *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, close_fds=False)
    except FileNotFoundError:
        raise PfError("git is not installed (git pf merge runs git merge-tree)") from None


def collect(proc: subprocess.Popen, what: str, ok=(0,)) -> tuple[bytes, int]:
    out, err = proc.communicate()
    if proc.returncode not in ok:
        lines = err.decode("utf-8", "replace").strip().splitlines()
        if what == "merge-tree" and any(line.startswith("usage:") for line in lines):
            raise PfError("git pf merge needs git 2.38 or newer (git merge-tree --write-tree)")
        raise PfError(f"git {what} failed: {lines[-1] if lines else f'exit {proc.returncode}'}")
    return out, proc.returncode


def git_run(git_dir, args: list[str], ok=(0,)) -> bytes:
    return collect(spawn(git_dir, args), args[0], ok)[0]


def merge_bases(git, git_dir, ours: str, theirs: str) -> list[str]:
    """Every merge base of two commits, git's best one first. When both lines are linear
    since libgit2's merge base, it is the only one; otherwise git lists them all."""
    try:
        best = str(git.merge_base(ours, theirs) or "")
    except pygit2.GitError:
        best = ""
    if not best:
        return []
    if all(_linear_since(git, tip, best) for tip in (ours, theirs)):
        return [best]
    found = git_run(git_dir, ["merge-base", "--all", ours, theirs], ok=(0, 1)).decode().split()
    return sorted(found, key=lambda oid: oid != best)


def _linear_since(git, tip: str, base: str) -> bool:
    walker = git.walk(tip, pygit2.enums.SortMode.NONE)
    walker.hide(base)
    return all(len(c.parent_ids) <= 1 for c in walker)


def world_tree(git, commit_id: str | None, writer: TreeWriter) -> pygit2.Oid:
    if commit_id is not None:
        found = lookup(git, git[commit_id].tree_id.raw, img.WORLD_FS)
        if found is not None and found[0] == MODE_TREE:
            return pygit2.Oid(raw=found[1])
    return pygit2.Oid(raw=writer.write([]))


def stand_ins(git, ours: str, theirs: str, bases: list[str]) -> tuple[str, str]:
    """Commits standing in for ``ours`` and ``theirs`` whose trees are their worlds."""
    writer = TreeWriter(git)
    if len(bases) <= 1:
        parents = [str(git.create_commit(None, _SIG, _SIG, "base\n", world_tree(git, bases[0], writer), []))] if bases else []
        return tuple(str(git.create_commit(None, _SIG, _SIG, f"{name}\n", world_tree(git, oid, writer), parents))
                     for name, oid in (("ours", ours), ("theirs", theirs)))
    mirrored: dict[str, str] = {}
    walker = git.walk(ours, pygit2.enums.SortMode.TOPOLOGICAL | pygit2.enums.SortMode.REVERSE)
    walker.push(theirs)
    for commit in walker:
        parents = [mirrored[str(p)] for p in commit.parent_ids]
        tree = world_tree(git, str(commit.id), writer)
        mirrored[str(commit.id)] = str(git.create_commit(None, commit.author, commit.committer, commit.message, tree, parents))
    return mirrored[ours], mirrored[theirs]


def start_merge_tree(git_dir, ours_commit: str, theirs_commit: str, *, unrelated: bool,
                     diff3: bool = False) -> subprocess.Popen:
    """Start ``git merge-tree --write-tree -z``; ``finish`` reads its answer."""
    args = ["-c", f"merge.conflictStyle={'diff3' if diff3 else 'merge'}", "merge-tree", "--write-tree", "-z"]
    args += ["--allow-unrelated-histories"] if unrelated else []
    return spawn(git_dir, args + [ours_commit, theirs_commit])


def finish(proc: subprocess.Popen) -> TreeMerge:
    out, code = collect(proc, "merge-tree", ok=(0, 1))
    return parse(out, code == 0)


def merge_tree(git_dir, ours_commit: str, theirs_commit: str, *, unrelated: bool, diff3: bool = False) -> TreeMerge:
    return finish(start_merge_tree(git_dir, ours_commit, theirs_commit, unrelated=unrelated, diff3=diff3))


def parse(out: bytes, clean: bool) -> TreeMerge:
    fields = out.split(b"\0")
    result = TreeMerge(fields[0].decode(), clean)
    i = 1
    while i < len(fields) and (m := _STAGE.match(fields[i])):
        result.stages.append(Stage(int(m.group(1), 8), m.group(2).decode(), int(m.group(3)), m.group(4)))
        i += 1
    if i < len(fields) and fields[i] == b"":
        i += 1
    while i + 2 < len(fields) and fields[i].isdigit():
        n = int(fields[i])
        paths = fields[i + 1 : i + 1 + n]
        kind, text = fields[i + 1 + n], fields[i + 2 + n]
        result.messages.append(Message(list(paths), kind.decode("utf-8", "replace"),
                                       text.decode("utf-8", "replace").rstrip("\n")))
        i += n + 3
    return result
