"""``git pf install|uninstall|push|fetch|clone|remote-store|gc`` and the hidden ``pre-push`` hook entry."""
from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from .app import JsonOpt, app, emit, open_repo

QuietOpt = typer.Option(False, "-q", "--quiet", help="No progress output.")


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


@app.command()
def install(
    remote: Optional[str] = typer.Option(None, "--remote", help="Remote to configure (default: origin, else every remote)."),
    claude_code: bool = typer.Option(False, "--claude-code", help="Instead: add git-pf's hooks to Claude Code's settings."),
    scope: str = typer.Option("project", "--scope", help="With --claude-code: project (.claude/settings.json) or user (~/.claude)."),
    check: bool = typer.Option(False, "--check", help="With --claude-code: run a test event through the installed hook and report."),
    as_json: bool = JsonOpt,
) -> None:
    """Chain the git-pf pre-push hook and configure remotes so plain git push/fetch carry images."""
    if claude_code:
        from .cmd_integrations import install_claude_code

        return install_claude_code(scope, as_json, check)
    from ..transport import install as install_mod

    changed = install_mod.install(open_repo(), remote)

    def human() -> None:
        if not changed["hooks"] and not changed["config"] and not changed["dropped"]:
            typer.echo("git-pf already installed; nothing changed")
            return
        for h in changed["hooks"]:
            typer.echo(f"installed hook {h} in {changed['hooks_dir']}")
        for c in changed["config"]:
            typer.echo(f"set {c}")
        for c in changed["dropped"]:
            typer.echo(f"removed {c} (it let a fetch move local tags)")

    emit(as_json, changed, human)


@app.command()
def uninstall(
    claude_code: bool = typer.Option(False, "--claude-code", help="Instead: take git-pf's hooks out of Claude Code's settings."),
    scope: str = typer.Option("project", "--scope", help="With --claude-code: project or user."),
    as_json: bool = JsonOpt,
) -> None:
    """Remove what 'git pf install' added and put back any hook it displaced."""
    if claude_code:
        from .cmd_integrations import uninstall_claude_code

        return uninstall_claude_code(scope, as_json)
    from ..transport import install as install_mod

    removed = install_mod.uninstall(open_repo())
    emit(as_json, removed, lambda: typer.echo(
        f"removed {len(removed['hooks'])} hooks and {len(removed['config'])} config values"))


@app.command()
def push(
    remote: Optional[str] = typer.Argument(None, help="Remote name or URL (default: origin)."),
    revs: List[str] = typer.Argument(None, help="Image branches or tags to push (default: the current branch)."),
    all_: bool = typer.Option(False, "--all", help="Push every image branch and tag."),
    force: bool = typer.Option(False, "-f", "--force", help="Overwrite remote branches that diverged."),
    quiet: bool = QuietOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Push images and every side-store object they reach that the remote lacks."""
    from ..transport import push as push_mod, remotes
    from ..transport.progress import Progress

    repo = open_repo()
    result = push_mod.push(repo, remotes.resolve(repo, remote), list(revs or []), all_, force, Progress(quiet or as_json))
    up = result.upload
    emit(as_json, result.to_json(), lambda: quiet or typer.echo(
        f"pushed {len(result.refs)} refs to {result.remote}: {up.sent_objects} of {up.objects} objects sent "
        f"({_size(up.sent_bytes)}) to {up.destination or 'nowhere (no images)'}"))


@app.command()
def fetch(
    remote: Optional[str] = typer.Argument(None, help="Remote name (default: origin)."),
    quiet: bool = QuietOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Fetch image refs and trees; side-store objects come later, when first needed."""
    from ..transport import fetch as fetch_mod, remotes
    from ..transport.progress import Progress

    repo = open_repo()
    target = remotes.resolve(repo, remote)
    result = fetch_mod.fetch(repo, target, Progress(quiet or as_json))

    def human() -> None:
        for name in result.created:
            typer.echo(f"new branch {name}")
        for name in result.updated:
            typer.echo(f"fast-forwarded {name}")
        for name in result.new_tags:
            typer.echo(f"new tag {name}")
        for name in result.diverged:
            typer.echo(f"warning: {name} diverged from {result.remote}; left as is "
                       f"(theirs: {target.tracking('heads/' + name)})", err=True)

    emit(as_json, result.to_json(), lambda: quiet or human())
    if not as_json:
        _fetch_warnings(result, target)


def _fetch_warnings(result, target) -> None:
    """The lines a fetch says even when quiet: local tags kept, and the remote's store record."""
    for name in result.kept_tags:
        typer.echo(f"warning: tag {name} differs from {result.remote}'s; yours is kept "
                   f"(theirs: {target.tracking('tags/' + name)})", err=True)
    if result.store_note:
        typer.echo(result.store_note, err=True)


@app.command()
def clone(
    url: str = typer.Argument(..., help="The remote to clone."),
    directory: Optional[Path] = typer.Argument(None, help="Where to clone (default: the URL's last component)."),
    quiet: bool = QuietOpt,
    as_json: bool = JsonOpt,
) -> None:
    """git clone + image refs + install: ready for 'git pf checkout'."""
    from ..transport import fetch as fetch_mod
    from ..transport.progress import Progress

    if directory is None:
        name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        directory = Path(name[:-4] if name.endswith(".git") else name)
    from ..transport import remotes

    repo, result = fetch_mod.clone(url, directory, Progress(quiet or as_json))
    pinned = f"; objects at {result.pinned} (pinned from its store record)" if result.pinned else ""
    emit(as_json, {"path": str(repo.git_dir.parent if repo.git.workdir else repo.git_dir), **result.to_json()},
         lambda: quiet or typer.echo(f"cloned into '{directory}': {len(result.created)} image branches{pinned}"))
    if not as_json:
        _fetch_warnings(result, remotes.resolve(repo, "origin"))


@app.command("remote-store")
def remote_store(
    remote: Optional[str] = typer.Argument(None, help="Remote name (default: origin)."),
    value: Optional[str] = typer.Argument(None, help="Set the adapter: git, file, file:<dir>, lfs, lfs:<url>, "
                                          "s3://<bucket>/<prefix>."),
    accept: bool = typer.Option(False, "--accept", help="Pin the store the remote records (as last fetched)."),
    as_json: bool = JsonOpt,
) -> None:
    """Show, set or accept where a remote keeps side-store objects (pinned in pf.remote.<name>.store)."""
    from ..core.errors import UsageError
    from ..transport import adapters, remotes

    repo = open_repo()
    target = remotes.resolve(repo, remote)
    if accept and value is not None:
        raise UsageError("give a store or --accept, not both")
    if accept:
        chosen = adapters.accept(repo, target)
    elif value is not None:
        chosen = adapters.configure(repo, target, value)
    else:
        chosen = adapters.choice(repo, target, unconfirmed="ignore")
    note = adapters.record_note(repo, target)
    emit(as_json, {"remote": target.arg, **chosen.to_json(), "where": adapters.describe(repo, target, chosen),
                   "note": note},
         lambda: typer.echo(f"{target.arg}: {chosen.value} ({chosen.source})"))
    if note and not as_json:
        typer.echo(note, err=True)


@app.command()
def gc(
    dry_run: bool = typer.Option(False, "-n", "--dry-run", help="Only report what would be removed."),
    prune: Optional[str] = typer.Option(None, "--prune", help="Remove unreached objects older than DATE "
                                        "(default gc.pruneExpire or 2.weeks.ago; 'now', 'never')."),
    as_json: bool = JsonOpt,
) -> None:
    """Remove side-store objects that no image (ref, remote-tracking ref, running mount) reaches."""
    from ..executors.worlds import WorldCache
    from ..transport import gc as gc_mod

    repo = open_repo()
    result = gc_mod.gc(repo, dry_run, prune)
    worlds = 0 if dry_run else WorldCache.clear(repo)  # docs/record.md, "The world cache"

    def human() -> None:
        if result.unknown_indexes:
            typer.echo(f"warning: {len(result.unknown_indexes)} chunk indexes are not available; nothing removed",
                       err=True)
        verb = "would remove" if dry_run else "removed"
        for oid in result.removed if dry_run else ():
            typer.echo(oid)
        typer.echo(f"{verb} {len(result.removed)} objects ({_size(result.removed_bytes)}); kept {result.kept}, "
                   f"spared {result.spared_recent} recent" + (f"; removed {worlds} cached worlds" if worlds else ""))

    emit(as_json, dict(result.to_json(), worlds_removed=worlds), human)


@app.command("pre-push", hidden=True)
def pre_push(remote: str = typer.Argument(...), url: str = typer.Argument(...)) -> None:
    """The pre-push hook: upload side-store objects of the images being pushed."""
    if os.environ.get("GIT_PF_SKIP_PUSH", "0") not in ("0", "", "false", "no"):
        return
    from ..transport import push as push_mod
    from ..transport.progress import Progress

    repo = open_repo()
    lines = sys.stdin.read().splitlines()
    result = push_mod.pre_push(repo, remote, url, lines, Progress(False))
    if result.sent_objects and sys.stderr.isatty():
        typer.echo(f"git-pf: uploaded {result.sent_objects} objects ({_size(result.sent_bytes)}) to "
                   f"{result.destination}", err=True)
