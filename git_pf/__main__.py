"""``python -m git_pf`` runs the ``git-pf`` command, through the same entry point (signals,
the early ``--version``)."""
from .cli import main

main()
