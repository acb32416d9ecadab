"""``git pf blame``: which step of a failed run decided its failure (docs/blame.md).

``engine`` runs the trials (``trials``: fork at a step with a perturbed response
(``perturb``), the rest of the run again, a grade (``grade``)), ``store`` keeps
them under ``refs/pf/blame/<run>/`` and reads them back, ``cost`` estimates and
meters the spend, ``stats`` holds the statistics. An operation: it may import
the object model, the layers, ``git_pf.runs`` and the snapshot; nothing below
imports it.
"""
