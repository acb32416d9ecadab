"""The world layer: the agent's sandbox tree, its environment and processes.

``capture`` turns a directory into a git tree plus ``fs.attrs`` records,
``restore`` writes one back, ``env`` reads and redacts environments, ``procs``
records the process table; ``merge`` (with ``merge_attrs``, ``merge_env`` and
``gitmerge``) is the layer's three-way merge. Nothing here writes refs or
commits; ``git_pf.image`` assembles images.
"""
