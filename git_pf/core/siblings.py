"""Temporary sibling directories a checkout builds in: ``.NAME.pf-KIND-PID-RANDOM``.

``git pf checkout`` (and ``merge --checkout``) fills one beside its target
and renames it into place; a killed process leaves it behind. While one
exists, a marker ``$GIT_DIR/pf/scratch/<its name>`` holds its path. A
leftover whose process is gone is removed by the next checkout into the same
target (``remove_leftovers``) and by ``git pf gc`` (``remove_recorded``).
Removes only real directories whose name has this exact pattern.
"""
from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from .liveness import may_have_written

KINDS = ("checkout", "old", "merge")
_PATTERN = re.compile(r"\.pf-(checkout|old|merge)-(\d+)-[a-z0-9_]+$")


def _markers(git_dir: Path) -> Path:
    return Path(git_dir) / "pf" / "scratch"


def make(dest: Path, kind: str, git_dir: Path) -> Path:
    """A new empty sibling of ``dest``, recorded until ``drop``, with the mode ``mkdir`` would give
    it (the umask's, not ``mkdtemp``'s 0700): renamed into place, it is the target."""
    tmp = Path(tempfile.mkdtemp(dir=dest.parent, prefix=f".{dest.name}.pf-{kind}-{os.getpid()}-"))
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)
    markers = _markers(git_dir)
    markers.mkdir(parents=True, exist_ok=True)
    (markers / tmp.name).write_text(str(tmp))
    return tmp


def drop(tmp: Path, git_dir: Path) -> None:
    """Remove ``tmp`` (if still there) and its marker."""
    _remove_dir(tmp)
    (_markers(git_dir) / tmp.name).unlink(missing_ok=True)


def _remove_dir(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        for root, dirs, _ in os.walk(path):  # recorded modes may have made a directory unwritable
            for d in dirs:
                full = os.path.join(root, d)
                if not os.path.islink(full):
                    os.chmod(full, 0o700)
        shutil.rmtree(path, ignore_errors=True)


def _dead_owner(path: Path, stem: str | None = None) -> bool:
    """True when ``path`` is a sibling (of ``.<stem>`` when given) whose process is gone, or
    whose pid now belongs to a process started after the sibling was made."""
    name = path.name
    if stem is not None:
        if not name.startswith(f".{stem}"):
            return False
        found = _PATTERN.fullmatch(name[len(stem) + 1:])
    else:
        found = _PATTERN.search(name)
    if found is None:
        return False
    try:
        made = os.lstat(path).st_mtime
    except FileNotFoundError:
        return False
    return not may_have_written(int(found.group(2)), made)


def remove_leftovers(dest: Path, git_dir: Path) -> list[Path]:
    """Siblings of ``dest`` left by a checkout whose process is gone, removed."""
    removed = []
    try:
        names = os.listdir(dest.parent)
    except OSError:
        return removed
    for name in names:
        if _dead_owner(dest.parent / name, dest.name):
            drop(dest.parent / name, git_dir)
            removed.append(dest.parent / name)
    return removed


def remove_recorded(git_dir: Path) -> list[Path]:
    """Every recorded sibling whose process is gone, removed (for ``git pf gc``)."""
    removed = []
    markers = _markers(git_dir)
    if not markers.is_dir():
        return removed
    for marker in markers.iterdir():
        if not _dead_owner(marker):
            continue
        try:
            path = Path(marker.read_text())
        except (OSError, UnicodeDecodeError):
            path = None
        if path is not None and path.name == marker.name:
            _remove_dir(path)
            removed.append(path)
        marker.unlink(missing_ok=True)
    return removed
