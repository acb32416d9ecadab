"""``git pf report``: a recorded run as one self-contained HTML file (docs/report.md).

The file is written whole or not at all (a temporary file beside it, renamed into place);
``-o -`` writes the page to stdout. ``--json`` prints what was written.
"""
from __future__ import annotations

import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Optional

import typer

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo


def _default_name(data: dict) -> str:
    name = data.get("branch") or f"run-{data['tip'][:8]}"
    return "pf-report-" + re.sub(r"[^A-Za-z0-9._-]+", "-", name) + ".html"


def _write(path: Path, text: bytes) -> None:
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"'{folder}' is not a directory", param="output")
    fd, tmp = tempfile.mkstemp(prefix=".pf-report-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@app.command()
def report(
    rev: str = typer.Argument(..., help="A recorded run: its branch, or any image of its line."),
    output: Optional[str] = typer.Option(None, "-o", "--output", metavar="FILE.html",
                                         help="Where to write the page ('-': stdout; default: pf-report-<branch>.html here)."),
    blame: Optional[str] = typer.Option(None, "--blame", metavar="RUN",
                                        help="Draw this blame run's chart (default: the blame run named after REV's branch, if any)."),
    replay: Optional[Path] = typer.Option(None, "--replay", metavar="REPORT.json",
                                          help="Show the divergence of a 'git pf replay --json' report.", dir_okay=False),
    as_json: bool = JsonOpt,
) -> None:
    """Write a recorded run as one self-contained HTML page: steps, exchanges, world diffs, effects, forks, blame."""
    from ..report import model, render

    if output == "-" and as_json:
        raise UsageError("--json describes a written file; it cannot go with -o - (the page itself goes to stdout)")
    replayed = None
    if replay is not None:
        try:
            replayed = model.read_replay(replay.read_bytes())
        except OSError as e:
            raise UsageError(f"cannot read '{replay}': {e.strerror or e}", param="replay") from None
    data = model.report_data(open_repo(), rev, blame=blame, replay=replayed)
    text = render.page(data).encode("utf-8")
    if output == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(text)
        sys.stdout.buffer.flush()
        return
    path = Path(output) if output else Path(_default_name(data))
    _write(path, text)
    steps = data["steps"][-1]["step"] if data["steps"] else 0
    emit(as_json, {"path": str(path.resolve()), "bytes": len(text), "steps": steps},
         lambda: typer.echo(f"wrote {path} ({len(text):,} bytes, {steps} steps)"))
