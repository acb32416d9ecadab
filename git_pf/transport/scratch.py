"""A throwaway repository beside this one, for transfers whose objects must not stay here.

Two transfers of the git adapter would otherwise change this repository in a
way a user sees: the depth-1 fetch of a remote's objects index makes the
repository *shallow* (some servers then refuse its pushes), and the data
pack of a push would stay in ``objects/pack/`` as a second full copy of the
side store. Both run in a scratch repository instead:
``$GIT_DIR/pf/transfer-<pid>-<random>``, which borrows this repository's
objects through ``objects/info/alternates`` and its config through an
``include`` (so remote names, URL rewrites and credentials work as here), and
is removed when the transfer ends. What must stay (an index commit and its
tree, a few KB) is copied in with ``copy_index``; a scratch left by a killed
process (its pid gone, or reused since: ``liveness``) is removed by the next
transfer (docs/transport.md, "Scratch repositories").

Writes only inside ``$GIT_DIR/pf/transfer-*`` and raw objects into the
repository's object database; never refs.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

import pygit2

from ..core.errors import DataError
from ..core.gitdir import common_dir
from ..image.tree import MODE_TREE, blob_size, over_limit, read_tree
from ..core.liveness import may_have_written

PREFIX = "transfer-"


def sweep(git_dir: Path) -> list[Path]:
    """Remove scratch repositories whose process is gone (or whose pid now names a process
    started after the scratch was made); the paths removed."""
    removed = []
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(git_dir / "pf"):
            if not entry.name.startswith(PREFIX):
                continue
            pid = entry.name[len(PREFIX):].partition("-")[0]
            try:
                made = entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if pid.isdigit() and not may_have_written(int(pid), made):
                shutil.rmtree(entry.path, ignore_errors=True)
                removed.append(Path(entry.path))
    return removed


@contextlib.contextmanager
def repository(git: pygit2.Repository, shallow: list[str] = ()) -> Iterator[tuple[Path, pygit2.Repository]]:
    """A bare scratch repository borrowing ``git``'s objects, removed on exit.

    ``shallow`` seeds its shallow file and a ref per commit, so a depth-1 fetch
    there negotiates from those commits (their parents need not exist)."""
    git_dir = Path(common_dir(git.path))
    (git_dir / "pf").mkdir(exist_ok=True)
    sweep(git_dir)
    path = Path(tempfile.mkdtemp(dir=git_dir / "pf", prefix=f"{PREFIX}{os.getpid()}-"))
    try:
        (path / "objects" / "pack").mkdir(parents=True)
        (path / "objects" / "info").mkdir()
        (path / "objects" / "info" / "alternates").write_text(str(git_dir / "objects") + "\n")
        (path / "refs" / "heads").mkdir(parents=True)
        (path / "HEAD").write_text("ref: refs/heads/main\n")
        # This repository's config first (remotes, URL rewrites, credentials), then bare.
        (path / "config").write_text(f"[include]\n\tpath = {git_dir / 'config'}\n"
                                     "[core]\n\trepositoryformatversion = 0\n\tbare = true\n")
        for n, commit in enumerate(shallow):
            (path / "refs" / "heads" / f"seen-{n}").write_text(commit + "\n")
        if shallow:
            (path / "shallow").write_text("".join(c + "\n" for c in sorted(set(shallow))))
        yield path, pygit2.Repository(str(path))
    finally:
        shutil.rmtree(path, ignore_errors=True)


def copy_index(src: pygit2.Repository, dst: pygit2.Repository, commit: str) -> None:
    """Copy the commit ``commit`` and its whole tree (not its parents) from ``src`` into
    ``dst``, skipping what ``dst`` already holds. An object over ``pf.maxBlobSize`` (by its
    header; a remote's index holds only small ones) is a DataError, not read."""
    dst_odb = dst.odb

    def copy(oid: pygit2.Oid) -> bool:
        if oid in dst_odb:
            return False
        problem = over_limit(blob_size(src, oid.raw))
        if problem:
            raise DataError(f"objects index {commit[:12]}: object {oid}: {problem}")
        kind, data = src.odb.read(oid)
        dst_odb.write(kind, data)
        return True

    def copy_tree(raw: bytes) -> None:
        if pygit2.Oid(raw=raw) in dst_odb:
            return  # written after its children, so a tree here has all it names
        for _, mode, child in read_tree(src, raw):
            if mode == MODE_TREE:
                copy_tree(child)
            else:
                copy(pygit2.Oid(raw=child))
        copy(pygit2.Oid(raw=raw))

    obj = src[commit]
    copy_tree(obj.peel(pygit2.Tree).id.raw)
    copy(obj.id)
