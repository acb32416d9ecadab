"""``git pf mount``, ``git pf umount``, ``git pf mounts``: images as directories."""
from __future__ import annotations

from pathlib import Path

import typer

from ..core.errors import NotARepository
from . import format as fmt
from .app import JsonOpt, app, emit, mount_manager, open_repo, warn


@app.command()
def mount(
    rev: str = typer.Argument(..., help="The image to mount."),
    directory: Path = typer.Argument(..., help="Where to mount it (created when missing)."),
    rw: bool = typer.Option(False, "--rw", help="Copy-on-write: changes go to an upper layer under $GIT_DIR/pf/mounts/."),
    foreground: bool = typer.Option(False, "--foreground", help="Serve in this process until unmounted."),
    force: bool = typer.Option(False, "--force", help="Mount over a non-empty directory (hiding its contents while mounted)."),
    as_json: bool = JsonOpt,
) -> None:
    """Mount an image's world as a directory; returns once it is ready."""
    manage = mount_manager()
    state, notes = manage.mount(open_repo(), rev, directory, rw, foreground, force=force)
    for line in notes:
        warn(line)
    if not foreground:
        emit(as_json, {"id": state.id, "image": state.image, "mountpoint": state.mountpoint, "mode": state.mode,
                       "pid": state.pid}, lambda: typer.echo(f"mounted {state.image[:12]} at {state.mountpoint} ({state.mode})"))


@app.command()
def umount(
    directory: Path = typer.Argument(..., help="The mountpoint."),
    discard: bool = typer.Option(False, "--discard", help="Also delete the upper layer's changes not yet snapshotted."),
) -> None:
    """Unmount (from anywhere: the mount names its repository); an --rw mount's unsnapshotted changes are
    kept for the next mount of the same image there."""
    manage = mount_manager()
    state = manage.umount(_repo_of_mount(directory), directory, discard)
    if state.dir.exists():
        warn(f"kept unsnapshotted changes of '{state.mountpoint}' ({fmt.size(state.upper_size())}); "
             f"'git pf mount --rw {state.image[:12]} {state.mountpoint}' resumes them, "
             f"'git pf umount --discard' drops them")


def _repo_of_mount(directory: Path):
    """The repository the kernel's mount table names for the mount at ``directory``, else the current one."""
    from ..mount import mounts as mounts_mod
    from ..repo import Repo

    git_dir = mounts_mod.listed().get(mounts_mod.canonical(directory))
    if git_dir is not None:
        try:
            return Repo.open(git_dir)
        except NotARepository:
            pass  # moved or deleted since: the current repository may still hold the record
    return open_repo()


@app.command("mounts")
def list_mounts(as_json: bool = JsonOpt) -> None:
    """List mounts with their image, mode, status and upper-layer size; outside a repository, every
    git-pf mount of this machine with its repository."""
    from ..mount import mounts as mounts_mod

    try:
        states = [s.to_json() for s in mounts_mod.all_states(open_repo().git_dir)]
        everywhere = False
    except NotARepository:
        states, everywhere = mounts_mod.everywhere(), True

    def human() -> None:
        for s in states:
            line = (f"{(s['image'] or '?')[:12]}  {s['mode'] or '?'}  {s['status']:<9}  "
                    f"{fmt.size(s['upper_bytes']):>9}  {s['mountpoint']}")
            typer.echo(f"{line}  ({s['repository'] or 'repository unknown'})" if everywhere else line)

    emit(as_json, states, human)
