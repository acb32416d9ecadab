"""The data of ``git pf report``: one recorded run as the JSON the HTML page embeds (docs/report.md).

``report_data`` walks REV's first-parent line from its step 0 image to its tip and gives, per
step, its exchange (request and response as pretty JSON, a streamed reply reassembled by
``layers.trace.wire``), its world diff against the step before (file lists and unified patches
from ``layers.world.patch``) and the size of its effects ledger; then the tip's ledger, the fork graph
(``forkgraph``), the blame runs of the run (``blamedata``), the tool calls the tape shows (each
matched to a ledger entry, or not on the ledger) and a replay report's divergence, where a long
string that differs is shown as a line diff. Everything
read from an image is untrusted and only ever becomes JSON strings and numbers, cut at the
limits below so that a long run stays a file a browser opens quickly. Read-only.
"""
from __future__ import annotations

import difflib
import json
import os

from ..image import manifest as img, refs
from ..core.errors import DataError, UsageError
from ..image.tree import diff_trees
from ..image.layercheck import load
from ..layers.effects import ledger as ledger_mod
from ..layers.trace import exchange as exchange_mod, matching
from ..runs.llm import wire
from ..layers.world.diff import diff_world
from ..layers.world.names import real_path
from ..runs.steps import FORKED_TRAILER, RUN_END_TRAILER, run_plan, step_of
from ..layers.world.patch import patches as world_patches
from . import blamedata, forkgraph

BODY_CHARS = 6000  # a request or response shown per step (the head and the tail kept)
TEXT_CHARS = 4000  # a reply's text
VALUE_CHARS = 600  # an effect's args or result, a replay diff value
PATCH_CHARS = 20000  # one file's patch
PATCH_FILES = 30  # patched files per step
LIST_FILES = 300  # files listed per step
LIMITS = {"body_chars": BODY_CHARS, "text_chars": TEXT_CHARS, "value_chars": VALUE_CHARS,
          "patch_chars": PATCH_CHARS, "patch_files": PATCH_FILES, "list_files": LIST_FILES}


def cut(text: str, limit: int) -> str:
    """``text``, or its head and tail around a line saying how much was cut."""
    if len(text) <= limit:
        return text
    head = limit // 4
    return f"{text[:head]}\n… {len(text) - limit:,} characters cut …\n{text[len(text) - (limit - head):]}"


def pretty(value) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


def _body(body) -> object:
    """A tape BODY as what it says: parsed JSON, else its text, else a note on its bytes."""
    try:
        data = exchange_mod.body_bytes(body) if isinstance(body, dict) else b""
    except DataError:
        return "<a body that is not valid base64>"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(data)} bytes, not UTF-8>"
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _reply(entry: dict) -> list[dict]:
    """The reply's messages: the trace after the exchange less the request's own messages
    (``wire.messages`` gives those alone for an exchange that failed)."""
    every = wire.messages(entry)
    return every[len(wire.messages(dict(entry, response={"status": 599}))):]


def _tools(value, out: list[str]) -> list[str]:
    """The names of the tool calls in a reply's messages, whatever the API's shape."""
    if isinstance(value, dict):
        kind, name = value.get("type"), value.get("name")
        if kind == "function" and isinstance(value.get("function"), dict):
            name = value["function"].get("name")
        if kind in ("function", "function_call", "tool_use") and isinstance(name, str):
            out.append(name[:80])
        for v in value.values():
            _tools(v, out)
    elif isinstance(value, list):
        for v in value:
            _tools(v, out)
    return out


def exchange_view(entry: dict) -> dict:
    req, resp = entry.get("request") or {}, entry.get("response") or {}
    chunks = resp.get("chunks")
    shown = {"status": resp.get("status"), "headers": resp.get("headers") or {}}
    reply = _reply(entry)
    if isinstance(chunks, list):
        shown["stream"] = {"chunks": len(chunks)}
        shown["reply"] = reply
    else:
        shown["body"] = _body(resp.get("body"))
    request = {"method": req.get("method"), "path": req.get("path"), "query": req.get("query") or "",
               "headers": req.get("headers") or {}, "body": _body(req.get("body"))}
    return {"api": entry.get("api"), "method": req.get("method"), "path": req.get("path"),
            "status": resp.get("status"), "ms": entry.get("ms"), "streamed": isinstance(chunks, list),
            "draws": len(entry.get("draws") or []), "usage": wire.usage(entry),
            "request": cut(pretty(request), BODY_CHARS), "response": cut(pretty(shown), BODY_CHARS),
            "text": cut(wire.reply_text(entry), TEXT_CHARS), "tools": _tools(reply, [])[:20]}


def _pointers(git, image: img.ImageInfo) -> set[bytes]:
    return {p for p, e in load(git, image, img.WORLD_ATTRS, {}).items() if e.pointer}


def _patch_views(repo, a: img.ImageInfo, b: img.ImageInfo) -> tuple[list[dict], int]:
    git = repo.git
    ta, tb = (img.subtree(git, x.tree, img.WORLD_FS) for x in (a, b))
    found = world_patches(git, repo.store, ta, tb, _pointers(git, a), _pointers(git, b))
    out = []
    for path, data in found[:PATCH_FILES]:
        text = data.decode("utf-8", "replace")
        binary = "\nBinary files " in text or text.startswith("Binary files ")
        out.append({"path": os.fsdecode(path), "binary": binary, "cut": not binary and len(text) > PATCH_CHARS,
                    "patch": "" if binary else cut(text, PATCH_CHARS)})
    return out, max(0, len(found) - PATCH_FILES)


def world_view(repo, a: img.ImageInfo | None, b: img.ImageInfo) -> dict:
    """The world of ``b`` against ``a`` (None: every file of ``b``, listed without patches)."""
    git = repo.git
    if a is None:
        tb = img.subtree(git, b.tree, img.WORLD_FS)
        files = [os.fsdecode(real_path(p)) for p, _, _ in diff_trees(git, None, bytes.fromhex(tb) if tb else None)]
        lists, patches, more = {"added": files, "changed": [], "removed": [], "attrs": []}, [], 0
    else:
        d = diff_world(git, a, b)
        lists = {"added": d.added, "changed": d.changed, "removed": d.removed, "attrs": d.attrs_changed}
        patches, more = _patch_views(repo, a, b) if a.tree != b.tree else ([], 0)
    total = sum(len(v) for v in lists.values())
    left, shown = LIST_FILES, {}
    for key, paths in lists.items():
        shown[key], left = paths[:left], max(0, left - len(paths))
    return dict(shown, files_cut=total - sum(len(v) for v in shown.values()), patches=patches, patches_cut=more)


def _effects(image: img.ImageInfo) -> int | None:
    count = ((image.manifest.get("layers") or {}).get("effects") or {}).get("entries")
    return count if type(count) is int and count >= 0 else None


def _value(entry: dict, key: str) -> str | None:
    return cut(pretty(entry[key]), VALUE_CHARS) if key in entry else None


def tape_tools(entries: list[dict], ledger: list[dict]) -> list[dict]:
    """Every tool call the recorded replies asked for, in step order: ``{"step", "tool", "ledger"}``,
    ``ledger`` the number of the ledger entry of that tool it is matched to (in order, each entry
    once), or None when the ledger holds no call of it (a tool that is no ``git_pf.tool``)."""
    unused: dict[str, list[int]] = {}
    for n, e in enumerate(ledger, 1):
        unused.setdefault(str(e.get("tool")), []).append(n)
    out = []
    for entry in sorted(entries, key=lambda e: e["step"]):
        for name in _tools(_reply(entry), []):
            matched = unused.get(name) or []
            out.append({"step": entry["step"], "tool": name, "ledger": matched.pop(0) if matched else None})
    return out


def match_view(entries: list[dict]) -> dict:
    """The matching rules stored with the run (docs/record.md, "Profiles and masks") and its profiles."""
    profiles = sorted({str(e["match"].get("profile")) for e in entries
                       if isinstance(e.get("match"), dict) and e["match"].get("profile")})
    return dict(matching.rules_of(entries).to_json(), profiles=profiles)


def line_diff(recorded: str, live: str) -> str:
    """A unified line diff of two strings (two lines of context), cut at ``PATCH_CHARS``."""
    lines = difflib.unified_diff(recorded.splitlines(), live.splitlines(), "recorded", "live", n=2, lineterm="")
    return cut("\n".join(lines), PATCH_CHARS)


def _diff_row(r: dict) -> dict:
    row = {"path": str(r.get("path")), "missing": r.get("missing"),
           "recorded": cut(pretty(r.get("recorded")), VALUE_CHARS), "live": cut(pretty(r.get("live")), VALUE_CHARS)}
    a, b = r.get("recorded"), r.get("live")
    if isinstance(a, str) and isinstance(b, str) and (max(len(a), len(b)) > VALUE_CHARS // 4 or "\n" in a + b):
        row["lines"] = line_diff(a, b)  # the page shows this instead of two cut values
    return row


def ledger_view(entries: list[dict]) -> list[dict]:
    return [{"n": i, "tool": str(e.get("tool")), "class": str(e.get("side_effect_class")),
             "key": str(e.get("idempotency_key")), "ts": e.get("ts"), "args": _value(e, "args"),
             "result": _value(e, "result"), "error": _value(e, "error")} for i, e in enumerate(entries, 1)]


def run_line(git, tip: str) -> list[img.ImageInfo]:
    """The images of a run's first-parent line, its step 0 image first."""
    out, oid = [], tip
    while oid is not None:
        image = img.read_image(git, oid)
        out.append(image)
        if step_of(image) == 0 and not image.trailer(RUN_END_TRAILER):
            break
        oid = image.parents[0] if image.parents else None
    return out[::-1]


def branch_of(git, rev: str, tip: str) -> str | None:
    if refs.branch_tip(git, rev) == tip:
        return rev
    current = refs.current_branch(git) if rev in ("HEAD", "@") else None
    return current if current and refs.branch_tip(git, current) == tip else None


def replay_view(report) -> dict:
    """What the divergence panel shows of a ``git pf replay --json`` report; UsageError when it is none."""
    if not (isinstance(report, dict) and isinstance(report.get("bit_exact"), bool)
            and isinstance(report.get("exchanges"), dict) and "mismatch" in report and "divergence" in report):
        raise UsageError("the --replay file is not a 'git pf replay --json' report", param="replay")
    mismatch = report.get("mismatch") if isinstance(report.get("mismatch"), dict) else None
    rows = mismatch.get("diff") if mismatch and isinstance(mismatch.get("diff"), list) else []
    view = {k: report.get(k) if isinstance(report.get(k), dict) else None for k in ("exchanges", "draws", "effects")}
    return dict(view, bit_exact=report["bit_exact"], rev=str(report.get("rev") or ""),
                exit=report.get("exit") if type(report.get("exit")) is int else None,
                divergence=None if report.get("divergence") is None else str(report["divergence"]),
                mismatch=None if mismatch is None else {
                    "step": mismatch.get("step") if type(mismatch.get("step")) is int else None,
                    "line": str(mismatch.get("line") or ""),
                    "diff": [_diff_row(r) for r in rows if isinstance(r, dict)]})


def read_replay(data: bytes) -> dict:
    """A replay report file's content, parsed and checked (UsageError when it is not one)."""
    try:
        report = json.loads(data.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError included
        raise UsageError("the --replay file is not JSON", param="replay") from None
    replay_view(report)
    return report


def report_data(repo, rev: str, *, blame=None, replay: dict | None = None) -> dict:
    """The report of REV's recorded run. ``blame``: a blame run's name (None: the one named after
    REV's branch, when it exists). ``replay``: a ``git pf replay --json`` report."""
    git = repo.git
    replayed = replay_view(replay) if replay is not None else None
    plan = run_plan(git, rev)
    line = run_line(git, plan.tip)
    by_step = {e["step"]: e for e in plan.entries}
    steps, end, before = [], None, None
    for image in line:
        n = step_of(image)
        world = world_view(repo, before, image)
        if image.trailer(RUN_END_TRAILER):
            code = image.trailer(RUN_END_TRAILER)[-1]
            end = {"commit": image.id, "step": n, "exit": int(code) if code.lstrip("-").isdigit() else None,
                   "world": world, "effects": _effects(image)}
        else:
            entry = by_step.get(n) if n else None
            steps.append({"step": n, "commit": image.id, "subject": image.subject, "time": image.time,
                          "forked": bool(image.trailer(FORKED_TRAILER)), "effects": _effects(image),
                          "exchange": exchange_view(entry) if entry else None, "world": world})
        before = image
    branch = branch_of(git, rev, plan.tip)
    ids = {image.id for image in line}
    chosen = blamedata.view(repo, blame if blame is not None else blamedata.default_run(repo, rev), line=ids,
                            required=blame is not None)
    return {"v": 1, "rev": rev, "branch": branch, "tip": plan.tip, "steps": steps, "end": end,
            "ledger": ledger_view(plan.ledger), "tape_tools": tape_tools(plan.entries, plan.ledger),
            "match": match_view(plan.entries),
            "fork_graph": forkgraph.graph(git, line, branch), "blame": chosen,
            "blame_runs": blamedata.views(repo, ids, chosen), "replay": replayed, "limits": LIMITS}
