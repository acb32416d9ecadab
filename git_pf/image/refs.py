"""The ``refs/pf/`` namespace and revision parsing.

Branches live at ``refs/pf/heads/<name>``, tags at ``refs/pf/tags/<name>``,
the session's current branch is the symbolic ``refs/pf/HEAD``, and the
side-store index (owned by the transport) at ``refs/pf/objects``. A
revision is a branch or tag name, ``HEAD``, a full ``refs/pf/...`` name, or
a hex id prefix, followed by any chain of ``~N`` / ``^N``. Reads and moves
refs; never writes objects.
"""
from __future__ import annotations

import re
import sys
import time

import pygit2

from ..core.errors import PfError, UnknownRevision, UsageError

ROOT = "refs/pf/"
HEADS = "refs/pf/heads/"
TAGS = "refs/pf/tags/"
HEAD = "refs/pf/HEAD"
OBJECTS = "refs/pf/objects"
DEFAULT_BRANCH = "main"

LOCK_WAIT_S = 1.0  # how long a ref move waits for a lock held by someone else (as git's core.packedRefsTimeout)
_SUFFIX = re.compile(r"([~^])(\d*)")
_HEX = re.compile(r"^[0-9a-fA-F]{4,40}$")


def check_name(name: str, what: str = "branch") -> str:
    """``name`` when it is a valid name: a valid git ref name below refs/pf/heads/, not ``HEAD``, and not
    starting with '-' (it would read as an option wherever it is handed to a command)."""
    if not name or not pygit2.reference_is_valid_name(HEADS + name) or name == "HEAD" or name.startswith("-"):
        raise UsageError(f"'{name}' is not a valid {what} name")
    return name


def lookup(repo: pygit2.Repository, full: str) -> pygit2.Reference | None:
    """The ref ``full``, or None. pygit2 (1.21) keeps a reference to the name string a lookup is
    given, so that string is never freed: the name is interned, and a name looked up again and
    again (a run's branch, several times per step) costs one string, not one per lookup."""
    return repo.references.get(sys.intern(full))


def current_branch(repo: pygit2.Repository) -> str | None:
    """The branch refs/pf/HEAD points at (which may not exist yet), or None."""
    try:
        ref = repo.references.get(HEAD)
    except (ValueError, pygit2.GitError):
        return None
    if ref is None or ref.type != pygit2.enums.ReferenceType.SYMBOLIC:
        return None
    target = ref.target
    return target[len(HEADS) :] if target.startswith(HEADS) else None


def set_head(repo: pygit2.Repository, branch: str) -> None:
    repo.references.create(HEAD, HEADS + branch, force=True)


def branch_tip(repo: pygit2.Repository, name: str) -> str | None:
    ref = lookup(repo, HEADS + name)
    return str(ref.target) if ref is not None else None


def update_branch(repo: pygit2.Repository, name: str, new: str, old: str | None, log: str) -> None:
    """Move ``name`` from ``old`` (None: must not exist) to ``new`` atomically."""
    update_ref(repo, HEADS + name, new, old, log, f"branch '{name}'")


def ref_tip(repo: pygit2.Repository, full: str) -> str | None:
    """The id a full ref name (``refs/pf/...``) points at directly, or None."""
    ref = lookup(repo, full)
    return str(ref.target) if ref is not None and ref.type == pygit2.enums.ReferenceType.DIRECT else None


def update_ref(repo: pygit2.Repository, full: str, new: str, old: str | None, log: str, what: str | None = None) -> None:
    """Move the full ref ``full`` from ``old`` (None: must not exist) to ``new`` atomically."""
    what = what or f"ref '{full}'"
    try:
        if old is None:
            _when_unlocked(lambda: repo.create_reference_direct(full, pygit2.Oid(hex=new), False, message=log))
        else:
            ref = lookup(repo, full)
            if ref is None:
                raise KeyError(full)
            if str(ref.target) != old:
                raise PfError(f"{what} moved while this command ran; nothing was changed")
            _when_unlocked(lambda: ref.set_target(new, log))
    except pygit2.AlreadyExistsError:
        raise PfError(f"{what} was created while this command ran; nothing was changed") from None
    except pygit2.GitError as e:
        raise PfError(f"cannot update {what}: {e}") from None


def _when_unlocked(move) -> None:
    """Run ``move``, retrying for up to LOCK_WAIT_S while another process (a background
    ``git gc`` packing refs) holds the ref's lock file, or removed the empty directory the
    lock file was to go in (gc prunes emptied ``refs/`` directories after packing refs)."""
    deadline = time.monotonic() + LOCK_WAIT_S
    delay = 0.001
    while True:
        try:
            move()
            return
        except (OSError, pygit2.GitError) as e:
            if ("lock" not in str(e) and "No such file or directory" not in str(e)) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def is_index_ref(name: str) -> bool:
    """True for ``objects`` and ``remotes/<r>/objects`` (names relative to
    refs/pf/): objects indexes, not images; also for the store records
    ``meta/*`` and ``remotes/<r>/meta/*`` (docs/transport.md), not images either."""
    parts = name.split("/")
    if parts[0] == "meta" or (len(parts) >= 4 and parts[0] == "remotes" and parts[2] == "meta"):
        return True
    return name == "objects" or (len(parts) == 3 and parts[0] == "remotes" and parts[2] == "objects")


def is_image_ref(name: str) -> bool:
    """Whether a ref (name relative to refs/pf/) names an image: not an objects index or store
    record (``is_index_ref``), nor the settings commit of a blame run, ``blame/<run>/meta`` or
    ``remotes/<r>/blame/<run>/meta`` (docs/blame.md, "Storage")."""
    parts = name.split("/")
    blame_meta = parts[-1] == "meta" and ((len(parts) == 3 and parts[0] == "blame")
                                          or (len(parts) == 5 and parts[0] == "remotes" and parts[2] == "blame"))
    return not blame_meta and not is_index_ref(name)


def list_refs(repo: pygit2.Repository, prefix: str) -> dict[str, str]:
    """``{name: image id}`` of every direct ref under ``prefix``."""
    out = {}
    for full in repo.references:
        if full.startswith(prefix):
            ref = repo.references[full]
            if ref.type == pygit2.enums.ReferenceType.DIRECT:
                out[full[len(prefix) :]] = str(ref.target)
    return dict(sorted(out.items()))


def _base_oid(repo: pygit2.Repository, base: str) -> str | None:
    if base in ("HEAD", "@"):
        branch = current_branch(repo)
        return branch_tip(repo, branch) if branch else None
    candidates = [base] if base.startswith(ROOT) else [HEADS + base, TAGS + base, ROOT + base]
    for full in candidates:
        try:
            ref = lookup(repo, full)
        except (ValueError, pygit2.InvalidSpecError):
            ref = None
        if ref is not None:
            return str(ref.resolve().target)
    if _HEX.match(base):
        try:
            obj = repo.revparse_single(base)
        except (KeyError, ValueError, pygit2.GitError) as e:
            if "ambiguous" in str(e):
                raise UnknownRevision(f"short id '{base}' is ambiguous") from None
            return None
        return str(obj.peel(pygit2.Commit).id) if isinstance(obj, (pygit2.Commit, pygit2.Tag)) else None
    return None


def resolve(repo: pygit2.Repository, rev: str) -> str:
    """The commit id that ``rev`` names; UnknownRevision when it names none."""
    cut = min((i for i in (rev.find("~"), rev.find("^")) if i >= 0), default=len(rev))
    base, suffix = rev[:cut], rev[cut:]
    oid = _base_oid(repo, base) if base else None
    if oid is None:
        raise UnknownRevision(f"unknown revision '{rev}'")
    pos = 0
    for m in _SUFFIX.finditer(suffix):
        if m.start() != pos:
            break
        pos = m.end()
        op, num = m.group(1), int(m.group(2)) if m.group(2) else 1
        commit = repo[oid]
        if op == "~":
            for _ in range(num):
                if not commit.parent_ids:
                    raise UnknownRevision(f"revision '{rev}' goes past the first image")
                commit = repo[commit.parent_ids[0]]
        elif num:
            if num > len(commit.parent_ids):
                raise UnknownRevision(f"revision '{rev}': image {str(commit.id)[:12]} has no parent {num}")
            commit = repo[commit.parent_ids[num - 1]]
        oid = str(commit.id)
    if pos != len(suffix):
        raise UnknownRevision(f"unknown revision '{rev}'")
    return oid
