"""``python -m git_pf`` runs the ``git-pf`` command."""
from .cli.app import run

run()
