"""``git pf report``: a recorded run as one self-contained HTML page (docs/report.md).

``model`` gathers the data (steps, exchanges, world diffs, effects, the fork graph with
``forkgraph``, blame with ``blamedata``, a replay's divergence), ``render`` writes the page
around the script and stylesheet of ``assets/``. An operation: it reads images, refs and layers
and writes no repository data; nothing below it imports it.
"""
