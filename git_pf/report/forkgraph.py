"""The fork graph of a report: every branch that shares steps with a run, from git ancestry.

The run's own line (its step 0 image to its tip) is lane 0. Each other branch
(``refs/pf/heads/*``) and each finished blame trial (its verdict ref,
``refs/pf/blame/<run>/step-<N>/<k>``) is followed down its first parents until it
reaches a commit already drawn, whatever the depth: a fork of a fork joins the fork it was made
from. A line that never reaches the run shares no step with it and is left out. A commit's row
is its parent's plus one, so a fork's step N sits beside the run's step N. Read-only.
"""
from __future__ import annotations

import re

from ..image import manifest as img, refs
from ..runs.steps import RUN_END_TRAILER, step_of

MAX_NODES = 5000  # beyond this the graph says it was cut
BLAME = "refs/pf/blame/"
_VERDICT = re.compile(r"\A[^/]+/step-[0-9]+/[0-9]+\Z")  # <run>/step-<N>/<k>: a finished trial


def _tips(git) -> list[tuple[str, str]]:
    """``(label, commit)`` of every branch, then every blame verdict ref, in name order."""
    out = list(refs.list_refs(git, refs.HEADS).items())
    for name, oid in refs.list_refs(git, BLAME).items():
        if _VERDICT.match(name):
            out.append((f"blame:{name}", oid))
    return out


def _node(image: img.ImageInfo, row: int, lane: int) -> dict:
    return {"id": image.id, "step": step_of(image), "row": row, "lane": lane, "branches": [], "blame": None,
            "final": bool(image.trailer(RUN_END_TRAILER)), "subject": image.subject[:120],
            "outcome": (image.trailer("Pf-Blame-Outcome") or [None])[-1]}


def graph(git, line: list[img.ImageInfo], branch: str | None) -> dict:
    """Nodes (``id``, ``step``, ``row``, ``lane``, ``branches``) and edges (``[parent, child]``)
    around the run's ``line`` (its images, step 0 first)."""
    nodes: dict[str, dict] = {}
    edges: list[list[str]] = []
    for row, image in enumerate(line):
        nodes[image.id] = _node(image, row, 0)
        if row:
            edges.append([line[row - 1].id, image.id])
    lanes, cut = 1, False
    for label, tip in _tips(git):
        path, oid, seen = [], tip, set()
        while oid is not None and oid not in nodes and oid not in seen and len(nodes) + len(path) < MAX_NODES:
            seen.add(oid)
            image = img.read_image(git, oid)
            path.append(image)
            oid = image.parents[0] if image.parents else None
        if oid is None or oid in seen:
            continue  # shares no step with the run
        if oid not in nodes:
            cut = True
            break
        row = nodes[oid]["row"]
        trial_of = label[len("blame:"):].split("/", 1)[0] if label.startswith("blame:") else None
        for image in reversed(path):
            row += 1
            nodes[image.id] = _node(image, row, lanes)
            nodes[image.id]["blame"] = trial_of  # the blame run a trial's commits belong to (None: a branch)
            edges.append([oid, image.id])
            oid = image.id
        lanes += 1 if path else 0
        nodes[tip]["branches"].append(label)
    if branch and line and branch not in nodes[line[-1].id]["branches"]:
        nodes[line[-1].id]["branches"].insert(0, branch)
    return {"nodes": list(nodes.values()), "edges": edges, "lanes": lanes, "cut": cut}
