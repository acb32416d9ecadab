"""The ``git-pf`` command line: a thin layer over ``git_pf.Repo``.

``app`` holds the Typer application; each ``cmd_*`` module registers the
commands of one concept; ``commands`` imports them all.
"""
from __future__ import annotations

from .app import app, run


def main() -> None:
    run()


__all__ = ["app", "main"]
