"""The directory ``git_pf.runs.inject`` puts on a child's PYTHONPATH: its ``sitecustomize`` is the
in-process seam (docs/record.md, "Draws"). Nothing here is imported by git-pf itself but that
module, which ``git_pf.runs.tools`` shares with the hook."""
