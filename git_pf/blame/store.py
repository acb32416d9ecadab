"""Where a blame keeps its trials, and the summary read back from them (docs/blame.md, "Storage").

A blame run ``<run>`` lives under ``refs/pf/blame/<run>/``: ``meta`` (a commit
whose parent is the blamed run's tip and whose tree holds ``blame.json``, the
settings and the baseline's grade), ``step-<N>/<k>`` (the verdict of one
finished trial: the trial's final image tree, its parent that image, the
outcome in ``Pf-Blame-*`` trailers) and, while a trial runs,
``work/step-<N>/<k>`` (the trial's steps, removed once its verdict is written).
A run fetched from a remote is read from ``refs/pf/remotes/<r>/blame/<run>/``
(a local run of the same name wins). ``summary`` and ``runs`` are what the report
reads; what they read is checked (it may come from a remote): a damaged meta or
verdict is a ``DataError``. Writes and moves only refs under ``refs/pf/blame/``.
"""
from __future__ import annotations

import pygit2

from ..core import canonjson, config
from ..image import manifest as img, refs, signing
from ..core.errors import DataError, UsageError
from ..image.tree import MODE_FILE, TreeWriter
from . import stats
from ..store.packfile import packed

ROOT = refs.ROOT + "blame/"
TRACKING = refs.ROOT + "remotes/"  # a fetched run: refs/pf/remotes/<r>/blame/<run>/...
META_FILE = "blame.json"
OUTCOMES = ("flip", "no-flip", "undefined")
T_STEP, T_TRIAL, T_OUTCOME, T_REASON, T_COST = ("Pf-Blame-Step", "Pf-Blame-Trial", "Pf-Blame-Outcome",
                                                "Pf-Blame-Reason", "Pf-Blame-Cost-USD")
_RESERVED = ("meta", "work")


def check_run(name: str) -> str:
    """A blame run's name: a valid branch name of one component (no '/')."""
    refs.check_name(name, "blame run")
    if "/" in name:
        raise UsageError(f"'{name}' is not a valid blame run name (no '/' in it)")
    return name


def default_run(git, rev: str) -> str:
    """The branch REV names ('/' written '-'), else ``run-<8 hex>``."""
    base = refs.current_branch(git) if rev in ("HEAD", "@") else rev
    if base and refs.branch_tip(git, base) is not None:
        return check_run(base.replace("/", "-"))
    return f"run-{refs.resolve(git, rev)[:8]}"


def meta_ref(run: str) -> str:
    return f"{ROOT}{run}/meta"


def verdict_ref(run: str, step: int, k: int) -> str:
    return f"{ROOT}{run}/step-{step}/{k}"


def work_ref(run: str, step: int, k: int) -> str:
    return f"{ROOT}{run}/work/step-{step}/{k}"


def _metas(git) -> dict[str, str]:
    """``{run: ref prefix}`` of every blame run: the local ones (``refs/pf/blame/<run>/``), then those
    fetched from a remote (``refs/pf/remotes/<r>/blame/<run>/``, origin first) that no local run shadows."""
    found: dict[str, str] = {}
    for name in refs.list_refs(git, ROOT):
        run, _, rest = name.partition("/")
        if rest == "meta":
            found.setdefault(run, ROOT)
    tracked = sorted(refs.list_refs(git, TRACKING), key=lambda n: (not n.startswith("origin/"), n))
    for name in tracked:
        parts = name.split("/")
        if len(parts) == 4 and parts[1] == "blame" and parts[3] == "meta":
            found.setdefault(parts[2], f"{TRACKING}{parts[0]}/blame/")
    return found


def _prefix(git, run: str, local: bool = False) -> str | None:
    if local:
        return ROOT if refs.ref_tip(git, meta_ref(run)) is not None else None
    return _metas(git).get(run)


def adopt(git, run: str) -> bool:
    """Copy a run fetched from a remote (and no local one of its name) to ``refs/pf/blame/<run>/``,
    meta and verdicts, so that blaming it again resumes it here; True when there was one."""
    prefix = _prefix(git, run)
    if prefix is None or prefix == ROOT:
        return False
    read_meta(git, run)  # checked before anything is copied
    trials(git, run)
    for name, oid in refs.list_refs(git, f"{prefix}{run}/").items():
        if name == "meta" or name.startswith("step-"):
            refs.update_ref(git, f"{ROOT}{run}/{name}", oid, None, f"pf blame: {run} from {prefix}")
    return True


def runs(repo) -> list[str]:
    """The names of the blame runs in ``repo``, local or fetched."""
    return sorted(_metas(repo.git))


def _meta_problem(meta) -> str | None:
    """What is wrong with a ``blame.json`` read from a ref (it may come from a remote), or None."""
    if not isinstance(meta, dict) or meta.get("v") != 1:
        return "holds no blame.json of version 1"
    steps = meta.get("steps")
    if not (isinstance(steps, list) and len(steps) == 2 and all(type(n) is int for n in steps)
            and 1 <= steps[0] <= steps[1] <= 10**6):
        return "has no valid step range"
    for key, lo, hi in (("null_rate", 0.0, 1.0), ("alpha", 0.0, 1.0)):
        if type(meta.get(key)) not in (int, float) or not lo < meta[key] < hi:
            return f"has no valid {key}"
    if type(meta.get("k")) is not int or meta["k"] < 1 or type(meta.get("min_valid", 3)) is not int:
        return "has no valid k"
    if not isinstance(meta.get("rev"), str) or not isinstance(meta.get("perturb"), str) \
            or not isinstance(meta.get("grade"), dict) or not isinstance(meta.get("baseline"), dict):
        return "lacks its rev, perturb, grade or baseline"
    return None


def read_meta(git, run: str, local: bool = False) -> dict | None:
    """The ``blame.json`` of run ``run`` (None when there is no such blame run; with ``local``, no local
    one); DataError when damaged."""
    prefix = _prefix(git, run, local)
    oid = refs.ref_tip(git, f"{prefix}{run}/meta") if prefix else None
    if oid is None:
        return None
    commit = git.get(oid)
    tree = commit.tree if isinstance(commit, pygit2.Commit) else None
    entry = tree[META_FILE] if tree is not None and META_FILE in tree else None
    try:
        meta = canonjson.loads(git[entry.id].data) if entry is not None and entry.type_str == "blob" else None
    except ValueError:
        meta = None
    problem = _meta_problem(meta)
    if problem:
        raise DataError(f"blame run '{run}': its meta {oid[:12]} {problem}")
    return meta


def write_meta(git, run: str, meta: dict) -> str:
    """Write run ``run``'s meta commit (its parent: the blamed tip); refuses an existing one."""
    sig = config.signature(git)
    with packed(git):  # one pack, no loose object (docs/format.md)
        tw = TreeWriter(git)
        tree = tw.write([(META_FILE.encode(), MODE_FILE, tw.write_blob(canonjson.encode(meta)))])
        commit = signing.write_commit(git, sig, sig, f"blame {run}: settings and baseline\n", pygit2.Oid(raw=tree),
                                      [meta["rev"]])
    refs.update_ref(git, meta_ref(run), commit, None, f"pf blame: {run}")
    return commit


def write_verdict(git, run: str, step: int, k: int, tip: str, outcome: str, reason: str, cost: float) -> str:
    """The verdict of one finished trial whose final image is ``tip``; drops its work ref."""
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown outcome {outcome!r}")
    final = git[tip]
    trailers = [(T_STEP, str(step)), (T_TRIAL, str(k)), (T_OUTCOME, outcome),
                (T_REASON, " ".join(reason.split()) or "-"), (T_COST, f"{cost:.6f}")]
    sig = config.signature(git)
    message = img.format_message(f"blame {run}: step {step} trial {k}: {outcome}", trailers)
    with packed(git):  # one pack, no loose object (docs/format.md)
        commit = signing.write_commit(git, sig, sig, message, final.tree_id, [tip])
    full = verdict_ref(run, step, k)
    refs.update_ref(git, full, commit, refs.ref_tip(git, full), f"pf blame: step {step} trial {k}")
    drop_work(git, run, step, k)
    return commit


def drop_work(git, run: str, step: int, k: int) -> None:
    ref = git.references.get(work_ref(run, step, k))
    if ref is not None:
        ref.delete()


def trials(git, run: str) -> list[dict]:
    """The finished trials of run ``run``, by step and trial."""
    out = []
    prefix = f"{_prefix(git, run) or ROOT}{run}/"
    for name, oid in refs.list_refs(git, prefix).items():
        head, _, k = name.partition("/")
        if not head.startswith("step-") or not k.isdigit():
            continue
        commit = git.get(oid)
        if not isinstance(commit, pygit2.Commit):
            raise DataError(f"blame run '{run}': the verdict {name} ({oid[:12]}) is not a commit")
        t = dict(img.parse_trailers(commit.message))
        try:
            step, trial, cost = int(t[T_STEP]), int(t[T_TRIAL]), float(t.get(T_COST, "0"))
        except (KeyError, ValueError):
            raise DataError(f"blame run '{run}': the verdict {name} ({oid[:12]}) has no readable trailers") from None
        if t.get(T_OUTCOME) not in OUTCOMES or f"step-{step}" != head or str(trial) != k:
            raise DataError(f"blame run '{run}': the verdict {name} ({oid[:12]}) does not match its ref")
        parents = commit.parent_ids
        out.append({"step": step, "trial": trial, "outcome": t[T_OUTCOME], "reason": t.get(T_REASON, ""),
                    "commit": oid, "tip": str(parents[0]) if parents else None, "cost_usd": cost})
    return sorted(out, key=lambda t: (t["step"], t["trial"]))


def step_rows(meta: dict, found: list[dict]) -> tuple[list[dict], int | None]:
    """The statistics rows of every step in the run's range, and the decisive step."""
    first, last = meta["steps"]
    rows = []
    for step in range(first, last + 1):
        mine = [t["outcome"] for t in found if t["step"] == step]
        rows.append(stats.step_stats(step, mine.count("flip"), mine.count("no-flip"), mine.count("undefined"),
                                     null_rate=meta["null_rate"], alpha=meta["alpha"],
                                     min_valid=meta.get("min_valid", 3)))
    return stats.summarize(rows, alpha=meta["alpha"])


def summary(repo, run: str, estimate_usd: float | None = None) -> dict | None:
    """The summary of blame run ``run`` (docs/blame.md, "Storage"); None when there is none."""
    git = repo.git
    check_run(run)
    meta = read_meta(git, run)
    if meta is None:
        return None
    found = trials(git, run)
    rows, decisive = step_rows(meta, found)
    if estimate_usd is None:
        estimate_usd = meta.get("estimate_usd")
    return {"v": 1, "run": run, "rev": meta["rev"], "k": meta["k"], "grade": meta["grade"],
            "perturb": meta["perturb"], "baseline": meta["baseline"], "steps": rows, "decisive": decisive,
            "cost": {"estimate_usd": estimate_usd, "spent_usd": round(sum(t["cost_usd"] for t in found), 6)},
            "trials": [{k: t[k] for k in ("step", "trial", "outcome", "reason", "commit", "tip")} for t in found]}
