"""``git pf show``, ``git pf log`` and ``git pf diff``: reading images."""
from __future__ import annotations

import signal
import subprocess
from typing import Optional

import typer

from ..core.errors import EXIT_NEGATIVE, UsageError
from . import format as fmt, pipe
from .app import JsonOpt, app, emit, open_repo

StepOpt = typer.Option(None, "--step", "--at-step", metavar="N", help="The image of step N of the run REV is on.")
SigOpt = typer.Option(False, "--show-signature", help="Check each image's signature (docs/security.md); JSON: a 'signature' field.")


def _signatures(repo, images, on: bool) -> dict:
    """{id: Verdict} of ``images`` with --show-signature, else {}."""
    from ..image.verify import Verifier

    verifier = Verifier(repo.git) if on else None
    return {i.id: verifier.trust(i.id) for i in images} if on else {}


@app.command()
def show(
    rev: str = typer.Argument("HEAD", help="The image to show."),
    step: Optional[int] = StepOpt,
    show_signature: bool = SigOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Show an image: id, parents, agent, subject and a summary of every layer."""
    from ..image import layercheck
    from ..runs.steps import resolve_step, step_of

    repo = open_repo()
    image = resolve_step(repo, rev, step)
    layercheck.check(repo.git, image)  # a summary of an image whose layers do not parse would mislead

    sigs = _signatures(repo, [image], show_signature)

    def human() -> None:
        typer.echo(f"image {image.id}")
        if sigs:
            typer.echo(f"Signature: {sigs[image.id].describe()}")
        for i, parent in enumerate(image.parents):
            typer.echo(f"{'Parent' if len(image.parents) == 1 else f'Parent {i + 1}'}: {parent}")
        typer.echo(f"Author: {image.author}")
        typer.echo(f"Date:   {fmt.date(image)}")
        if step_of(image) is not None:
            typer.echo(f"Step:   {step_of(image)}")
        agent = image.manifest.get("agent", {})
        if agent.get("kind"):
            typer.echo(f"Agent:  {agent['kind']}{'/' + agent['version'] if agent.get('version') else ''}")
        if image.manifest.get("label"):
            typer.echo(f"Label:  {image.manifest['label']}")
        typer.echo("")
        for line in image.message.rstrip("\n").splitlines():
            typer.echo(f"    {line}".rstrip())
        typer.echo("")
        for line in fmt.layers(image) + [line for d in details.values() for line in d.lines()]:
            typer.echo(line)

    details = fmt.layer_details(repo, image)  # what a layer adds to its manifest summary (the cache: sharing)
    extra = {name: d.to_json() for name, d in details.items()}
    extra.update({"signature": sigs[image.id].to_json()} if sigs else {})
    emit(as_json, dict(image.to_json(), step=step_of(image), **extra), human)


@app.command()
def log(
    rev: Optional[str] = typer.Argument(None, help="Branch or image to start from (default: the current branch)."),
    graph: bool = typer.Option(False, "--graph", help="Draw the history graph (as git log --graph)."),
    max_count: Optional[int] = typer.Option(None, "-n", "--max-count", help="Show at most N images."),
    first_parent: bool = typer.Option(False, "--first-parent", help="Follow only the first parent of merges."),
    oneline: bool = typer.Option(False, "--oneline", help="One line per image."),
    show_signature: bool = SigOpt,
    as_json: bool = JsonOpt,
) -> Optional[int]:
    """List the images of a line of history, newest first."""
    repo = open_repo()
    if max_count is not None and max_count < 0:
        raise UsageError("-n must not be negative")
    if graph and not as_json:
        from ..image import refs

        start = refs.resolve(repo.git, rev or "HEAD")
        args = ["git", "--git-dir", str(repo.git_dir), "log", "--graph", "--format=%h %s", start]
        args += ["--first-parent"] if first_parent else []
        args += [f"--max-count={max_count}"] if max_count is not None else []
        code = subprocess.run(args).returncode  # git gives its own message when it fails
        if code == -signal.SIGPIPE:  # the reader of our stdout went away: end as git did
            raise BrokenPipeError
        return EXIT_NEGATIVE if code else 0
    images = repo.log(rev, max_count, first_parent)
    from ..runs.steps import step_of

    sigs = _signatures(repo, images, show_signature)

    def human() -> None:
        lines = []  # written at once: the whole history is read before anything is written anyway
        for image in images:
            step = step_of(image)
            if oneline:
                lines.append(f"{image.short} {'' if step is None else f'[step {step}] '}{image.subject}")
                continue
            lines.append(f"image {image.id}")
            if sigs:
                lines.append(f"Signature: {sigs[image.id].describe()}")
            lines.append(f"Date:   {fmt.date(image)}")
            if step is not None:
                lines.append(f"Step:   {step}")
            lines.append(f"\n    {image.subject}\n")
        if lines:
            typer.echo("\n".join(lines))
            if pipe.closed_stdout():  # the reader left during that one write, which Python may count as
                raise BrokenPipeError  # done when part of it went: end as git does (141), not with 0

    emit(as_json, [dict(i.to_json(), step=step_of(i), **({"signature": sigs[i.id].to_json()} if sigs else {}))
                   for i in images] if as_json else None, human)


class _BareArgsUsage(typer.core.TyperCommand):
    """A usage line as git writes one: required arguments bare (``A B``), not in braces."""

    def collect_usage_pieces(self, ctx) -> list[str]:
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


@app.command(cls=_BareArgsUsage)
def diff(
    a: str = typer.Argument(..., metavar="A", help="The old image."),
    b: Optional[str] = typer.Argument(None, metavar="B", help="The new image (with --at-step: optional)."),
    stat: bool = typer.Option(False, "--stat", help="Counts per layer only."),
    patch: bool = typer.Option(False, "-p", "--patch", help="Also the unified diff of world files, as git diff prints it."),
    step: Optional[int] = typer.Option(None, "--at-step", metavar="N",
                                       help="Step N of each run (of A alone: what its step N changed)."),
    as_json: bool = JsonOpt,
) -> None:
    """Compare two images layer by layer: files, messages, effects, env."""
    repo = open_repo()
    if step is not None:
        from ..runs.steps import at_step

        if b is None and step < 1:
            raise UsageError("--at-step: step 0 has no step before it to compare with; give A B")
        a, b = (at_step(repo.git, a, step - 1), at_step(repo.git, a, step)) if b is None else \
            (at_step(repo.git, a, step), at_step(repo.git, b, step))
    elif b is None:
        raise UsageError("diff needs two images A B (or one run and --at-step N)")
    d = repo.diff(a, b, patch=patch)

    def human() -> None:
        for line in d.lines(stat, patch):
            typer.echo(line)
        if d.patches:
            typer.echo("")
            stdout = typer.get_binary_stream("stdout")
            stdout.write(d.patch)
            stdout.flush()

    emit(as_json, d.to_json(), human)
