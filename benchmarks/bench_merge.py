"""``git pf merge`` against ``git merge-tree --write-tree`` on the same trees, in one run.

    python -m benchmarks.bench_merge [--files 10000] [--changed 100] [--runs 5]

A world of FILES text files (100 per directory); each side changes CHANGED
different files (ours edits the top of a file, theirs the bottom, and 10 files
are edited on both sides, in different hunks, so git merges them line by
line), and each side also adds messages and effects, so every layer merges.
Measured (best of RUNS): the whole merge through the Python API (all layers,
the merge image and the branch update) as a later merge (every world marked
sound on disk), as the first merge of these worlds as a user gets them
(snapshotted here: the marks the snapshots wrote, not the merged world's) and
as the first merge of worlds that arrived unmarked (fetched: no mark); the same through the ``git pf merge`` command (process
start included); and git's own ``git merge-tree --write-tree`` on plain
commits holding the same three trees, interleaved. Goal: within 1.5x of git.
A second pair of snapshotted worlds, whose sides changed different directories
(ours the first half, theirs the second), gives the first merge where git's
merged world holds theirs' directories as they are, against git on that pair; a
third, whose sides changed different files of every directory, the first merge
where every directory is merged. Each row says whether git merged the worlds or
they were merged without it (``merge.pathwise``: the main pair edits 10 files on
both sides, so git merges it; the other two need no git).

Each merge round opens the repository afresh (a new ``Repo``, the old one
dropped first, and this process's sound-tree memory forgotten), as each
``git pf merge`` is a fresh process: what one round read into libgit2's caches
(parsed trees, pack windows) never serves the next, as nothing of one
``git merge-tree`` process serves the next. Opening is not timed.
"""
from __future__ import annotations

import argparse
import gc
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from git_pf import Repo
from git_pf.image import refs, safepath
from git_pf.ops.snapshot_inputs import TraceInput

from .common import git_env, report, verdict, workdir

BODY = "".join(f"line {i} of a source file in the agent's sandbox\n" for i in range(20))


def _world(root: Path, files: int) -> list[Path]:
    paths = []
    for i in range(files):
        p = root / f"pkg{i // 100:03d}" / f"mod{i % 100:03d}.py"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(f"# file {i}\n" + BODY)
        paths.append(p)
    return paths


def _edit(path: Path, top: bool, tag: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[1 if top else -1] = f"{tag}\n"
    path.write_text("".join(lines))


def _fx(key: str, ts: int) -> dict:
    return {"ts": ts, "tool": "write_file", "args": key, "result": "ok", "idempotency_key": key,
            "side_effect_class": "idempotent"}


def build(base_dir: Path, files: int, changed: int) -> tuple[Repo, str, str, str]:
    repo, _ = Repo.init(base_dir / "repo")
    sandbox = base_dir / "sb"
    paths = _world(sandbox, files)
    msgs = [{"role": "user", "content": "refactor the package"}]
    base = repo.snapshot(sandbox, name="main", trace=TraceInput(messages=msgs), effects=[_fx("k0", 0)]).image
    repo.create_branch("side", base.id)
    step = files // (2 * changed)
    ours_paths = [paths[i * step] for i in range(changed)]
    theirs_paths = [paths[i * step + 1] for i in range(changed - 10)] + ours_paths[:10]
    for p in ours_paths:
        _edit(p, True, "ours")
    ours = repo.snapshot(sandbox, name="main", trace=TraceInput(messages=msgs + [{"role": "assistant", "content": "ours done"}]),
                         effects=[_fx("k0", 0), _fx("k-ours", 2)]).image
    for p in ours_paths:
        _edit(p, True, "line 0 of a source file in the agent's sandbox")
    for p in theirs_paths:
        _edit(p, False, "theirs")
    theirs = repo.snapshot(sandbox, name="side", trace=TraceInput(messages=msgs + [{"role": "assistant", "content": "theirs done"}]),
                           effects=[_fx("k0", 0), _fx("k-theirs", 1)]).image
    return repo, base.id, ours.id, theirs.id


def build_disjoint(repo: Repo, base_dir: Path, files: int, changed: int, prefix: str = "d",
                   same_dirs: bool = False) -> tuple[str, str, str]:
    """Branches ``PREFIX-main`` and ``PREFIX-side`` from one snapshot: ours edits CHANGED files in
    the first half of the directories, theirs CHANGED files in the second half (``same_dirs``:
    both in every directory, never the same file); (base, ours, theirs)."""
    sandbox = base_dir / f"sb-{prefix}"
    paths = _world(sandbox, files)
    base = repo.snapshot(sandbox, name=f"{prefix}-main").image
    repo.create_branch(f"{prefix}-side", base.id)
    step = files // (2 * changed)
    ours_paths = [paths[i * step] for i in range(changed)]
    theirs_paths = [paths[(1 if same_dirs else files // 2) + i * step] for i in range(changed)]
    for p in ours_paths:
        _edit(p, True, "ours")
    ours = repo.snapshot(sandbox, name=f"{prefix}-main").image
    for p in ours_paths:
        _edit(p, True, "line 0 of a source file in the agent's sandbox")
    for p in theirs_paths:
        _edit(p, False, "theirs")
    theirs = repo.snapshot(sandbox, name=f"{prefix}-side").image
    return base.id, ours.id, theirs.id


def git_reference(repo: Repo, base: str, ours: str, theirs: str) -> tuple[str, str]:
    def commit(image: str, parents: list[str]) -> str:
        tree = repo.git.revparse_single(f"{image}:world/fs").id
        args = ["git", "--git-dir", str(repo.git_dir), "commit-tree", str(tree), "-m", "w"]
        for p in parents:
            args += ["-p", p]
        return subprocess.run(args, check=True, capture_output=True, env=git_env(), text=True).stdout.strip()

    b = commit(base, [])
    return commit(ours, [b]), commit(theirs, [b])


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def best(fn, runs: int, setup=lambda: None) -> tuple[float, float]:
    """Best wall time and best CPU time (this process and its children, all threads) of ``fn``."""
    walls, cpus = [], []
    for _ in range(runs):
        setup()
        c0, t0 = _cpu(), time.perf_counter()
        fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(_cpu() - c0)
    return min(walls), min(cpus)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=10_000)
    ap.add_argument("--changed", type=int, default=100)
    ap.add_argument("--runs", type=int, default=15)
    args = ap.parse_args(argv)
    with workdir("merge") as d:
        repo, base, ours, theirs = build(d, args.files, args.changed)
        o, t = git_reference(repo, base, ours, theirs)
        git_cmd = ["git", "--git-dir", str(repo.git_dir), "merge-tree", "--write-tree", o, t]
        git_tree = subprocess.run(git_cmd, capture_output=True, text=True, check=True).stdout.split()[0]
        d_base, d_ours, d_theirs = build_disjoint(repo, d, args.files, args.changed)
        d_git_cmd = ["git", "--git-dir", str(repo.git_dir), "merge-tree", "--write-tree",
                     *git_reference(repo, d_base, d_ours, d_theirs)]
        s_base, s_ours, s_theirs = build_disjoint(repo, d, args.files, args.changed, "s", same_dirs=True)
        s_git_cmd = ["git", "--git-dir", str(repo.git_dir), "merge-tree", "--write-tree",
                     *git_reference(repo, s_base, s_ours, s_theirs)]
        by_git: dict[str, bool] = {}  # per pair: whether git merged the worlds (else merge.pathwise)

        marks_file = Path(repo.git_dir) / "pf" / "sound-trees"  # what the snapshots marked, if anything
        snapshot_marks = set(marks_file.read_text().split()[2:]) if marks_file.exists() else set()

        def reopen() -> None:  # no cache of one round serves the next (the docstring)
            nonlocal repo
            path = repo.git_dir.parent
            repo = None
            gc.collect()  # the old repository's packs and caches freed before the new one opens
            repo = Repo.open(path)

        def reset(keep_marks: bool = True, fetched: bool = False, branch: str = "main", tip_ours: str = ours) -> None:
            reopen()
            tip = refs.branch_tip(repo.git, branch)
            if tip != tip_ours:
                refs.update_branch(repo.git, branch, tip_ours, tip, "bench: reset")
            safepath.forget_sound_trees()  # each round checks the worlds as a fresh process does ...
            if fetched:  # ... and, for worlds that arrived unmarked (fetched), with no mark on disk
                safepath.prune_sound_trees(repo.git, keep=lambda tree: False)
            elif not keep_marks:  # ... or, for a first merge, with the marks the snapshots left (put back
                safepath.prune_sound_trees(repo.git, keep=lambda tree: tree in snapshot_marks)  # after a
                for tree in snapshot_marks:  # round that dropped them)
                    safepath.sound_marks(repo.git).add(tree)

        def api(theirs_name: str = "side", into: str = "main") -> None:
            result = repo.merge(theirs_name, into=into)
            assert result.status == "merged", result.status
            by_git[into] = next(r for r in result.layers if r.layer == "world").detail["ours"] is not None

        env = dict(os.environ, GIT_PF_REPO=str(repo.git_dir.parent),
                   PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")

        def cli() -> None:
            proc = subprocess.run(["git-pf", "merge", "side", "--into", "main"], capture_output=True, env=env)
            if proc.returncode != 0:
                raise RuntimeError(proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or proc.returncode)

        g, a, first, fresh, dg, dfirst, sg, sfirst = [], [], [], [], [], [], [], []
        for _ in range(args.runs):  # interleaved, so a busy moment weighs on all alike
            g.append(best(lambda: subprocess.run(git_cmd, check=True, capture_output=True), 1))
            first.append(best(api, 1, lambda: reset(keep_marks=False)))
            a.append(best(api, 1, reset))
            fresh.append(best(api, 1, lambda: reset(fetched=True)))
            dg.append(best(lambda: subprocess.run(d_git_cmd, check=True, capture_output=True), 1))
            dfirst.append(best(lambda: api("d-side", "d-main"), 1,
                               lambda: reset(keep_marks=False, branch="d-main", tip_ours=d_ours)))
            sg.append(best(lambda: subprocess.run(s_git_cmd, check=True, capture_output=True), 1))
            sfirst.append(best(lambda: api("s-side", "s-main"), 1,
                               lambda: reset(keep_marks=False, branch="s-main", tip_ours=s_ours)))
        (t_git, c_git), (t_api, c_api), (t_first, c_first), (t_fresh, c_fresh), (t_dgit, c_dgit), \
            (t_dfirst, c_dfirst), (t_sgit, c_sgit), (t_sfirst, c_sfirst) = [
                (min(w for w, _ in xs), min(c for _, c in xs)) for xs in (g, a, first, fresh, dg, dfirst, sg, sfirst)]
        how = lambda into: "git merged the worlds" if by_git.get(into) else "merged without git"  # noqa: E731
        merged_world = str(repo.git.revparse_single(refs.branch_tip(repo.git, "main") + ":world/fs").id)
        try:
            t_cli, c_cli = best(cli, args.runs, reset)
            cli_row = f"{t_cli * 1000:.1f} ms  {t_cli / t_git:.2f}x"
        except RuntimeError as e:  # the row says why instead of losing the rows above
            cli_row = f"failed: {e}"
        t_start, _ = best(lambda: subprocess.run([sys.executable, "-c", "import git_pf.cli.commands"], check=True),
                          args.runs)
    report(f"merge: {args.files} files, {args.changed} changed per side (best of {args.runs})", [
        ("git merge-tree --write-tree: wall", f"{t_git * 1000:.1f} ms", "reference"),
        ("Repo.merge (all layers, image + ref): wall", f"{t_api * 1000:.1f} ms  {t_api / t_git:.2f}x",
         f"goal <= 1.5x: {verdict(t_api <= 1.5 * t_git)}; {how('main')}"),
        ("  the first merge of snapshotted worlds", f"{t_first * 1000:.1f} ms  {t_first / t_git:.2f}x",
         f"goal <= 1.5x: {verdict(t_first <= 1.5 * t_git)}"),
        ("  the same, CPU (with git's)", f"{c_first * 1000:.1f} ms  {c_first / max(c_git, 1e-9):.2f}x", ""),
        ("  the first merge of worlds that arrived unmarked", f"{t_fresh * 1000:.1f} ms  {t_fresh / t_git:.2f}x",
         "fetched: every world checked"),
        ("  the same, CPU (with git's)", f"{c_fresh * 1000:.1f} ms  {c_fresh / max(c_git, 1e-9):.2f}x", ""),
        ("git merge-tree, sides in different directories", f"{t_dgit * 1000:.1f} ms", "reference"),
        ("  the first merge of these snapshotted worlds", f"{t_dfirst * 1000:.1f} ms  {t_dfirst / t_dgit:.2f}x",
         f"goal <= 1.5x: {verdict(t_dfirst <= 1.5 * t_dgit)}; {how('d-main')}"),
        ("  the same, CPU (with git's, if run)", f"{c_dfirst * 1000:.1f} ms  {c_dfirst / max(c_dgit, 1e-9):.2f}x",
         f"against git's {c_dgit * 1000:.1f} ms CPU"),
        ("git merge-tree, different files of the same directories", f"{t_sgit * 1000:.1f} ms", "reference"),
        ("  the first merge of these snapshotted worlds", f"{t_sfirst * 1000:.1f} ms  {t_sfirst / t_sgit:.2f}x",
         f"goal <= 1.5x: {verdict(t_sfirst <= 1.5 * t_sgit)}; {how('s-main')}"),
        ("  the same, CPU (with git's, if run)", f"{c_sfirst * 1000:.1f} ms  {c_sfirst / max(c_sgit, 1e-9):.2f}x",
         f"against git's {c_sgit * 1000:.1f} ms CPU"),
        ("  snapshot marks on disk", str(len(snapshot_marks)), "worlds the snapshots marked sound"),
        ("git merge-tree --write-tree: CPU", f"{c_git * 1000:.1f} ms", "reference (CPU: load-independent)"),
        ("Repo.merge: CPU (with git's)", f"{c_api * 1000:.1f} ms  {c_api / max(c_git, 1e-9):.2f}x",
         f"goal <= 1.5x: {verdict(c_api <= 1.5 * c_git)}"),
        ("git pf merge (command): wall", cli_row, "process start included"),
        ("  Python start + imports alone", f"{t_start * 1000:.1f} ms", ""),
        ("merged world == git's tree", str(merged_world == git_tree), verdict(merged_world == git_tree)),
        ("load average (1, 5, 15 min) at the end", " ".join(f"{x:.1f}" for x in os.getloadavg()),
         "other work on the machine"),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
