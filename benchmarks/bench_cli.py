"""The ``git pf`` command against git's, interleaved in one run, on a 5,000-file tree.

    python -m benchmarks.bench_cli [--runs 9] [--files 5000] [--changed 10]

Every command runs as a user types it (``git pf …`` through git's dispatcher,
output to /dev/null), with the repository's command server on (docs/server.md)
through ``git-pf`` as installed (the C client after ``make``), and, for
reference, with the server off (``GIT_PF_SERVER=0``) and, for the read
commands, through the Python client (``git-pf-python``). Each round runs every case once,
git's command right after git-pf's, so load on the machine weighs on both
alike; each figure is the median over ``--runs`` rounds, with the median CPU
time (user + sys) beside it: the client's and, under the server, that of the
forked child that ran the command. Cases: an incremental snapshot
(``--changed`` files changed) against ``git add -A && git commit -q``; a merge
of two branches that each changed one file against ``git merge``; ``log -n
20``, ``show``, ``diff --stat`` and ``-h`` against git's; then the server's
memory at rest and the first command after the server has gone (idle exit).
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .bench_snapshot import make_tree
from .common import git_env, report, sh, verdict, workdir

GOAL_SNAPSHOT = 1.0  # incremental snapshot / git add -A && git commit
GOAL_MERGE = 1.5  # git pf merge / git merge
GOAL_READ = 3.0  # log, show, diff --stat, -h / git's


def _env(repo: Path, first: Path | None = None, **extra) -> dict:
    """The environment of ``git pf`` on ``repo``: git-pf from the venv (the C client when built), or
    from ``first`` (the Python client)."""
    bin_dir = str(Path(sys.executable).parent)  # where git-pf is installed
    path = f"{first}:{bin_dir}" if first else bin_dir
    env = dict(git_env(), PATH=f"{path}:{os.environ.get('PATH', '')}", GIT_PF_REPO=str(repo))
    env.pop("GIT_PF_SERVER", None)
    env.update(extra)
    return env


class Timing(float):
    """Median wall time (the float) with the median CPU time (user + sys) of the same runs."""

    cpu: float


def _ms(t: float) -> str:
    return f"{t * 1000:.0f} ms" + (f" (CPU {t.cpu * 1000:.0f})" if isinstance(t, Timing) else "")


def _run(args, cwd=None, env=None) -> tuple[float, float]:
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(args, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode not in (0, 129):  # git -h exits 129
        raise SystemExit(f"{' '.join(map(str, args))} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime


def _children_cpu(pid: int | None) -> float:
    """CPU seconds of the reaped children of process ``pid`` (a server's commands)."""
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[13]) + int(fields[14])) / os.sysconf("SC_CLK_TCK")


def _children(pid: int | None) -> set[int] | None:
    """The live children of process ``pid`` (a server's spare and commands); None where unknown."""
    if pid is None:
        return set()
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return {int(x) for x in f.read().split()}
    except OSError:
        return None


def _settle(pid: int | None, before: set[int] | None) -> None:
    """Wait until the server has reaped the children it had before the command (the spare that ran
    it ends after its client has the status: its CPU counts once it is reaped), and a little more
    for the next spare to warm, so that git's command after it does not share the CPU with it."""
    for _ in range(400):
        now = _children(pid)
        if now is None or not (before & now):
            break
        time.sleep(0.005)
    time.sleep(0.03 if pid is not None else 0.0)


class Case:
    """One measured command: ``before(i)`` (untimed) runs ahead of round ``i``; ``server``: the
    command server's commands' CPU counts too."""

    def __init__(self, name, args, cwd=None, env=None, before=None, server=False):
        self.name, self.args, self.cwd, self.env, self.before = name, args, cwd, env, before
        self.server = server
        self.walls, self.cpus = [], []

    def once(self, i: int) -> None:
        if self.before is not None:
            self.before(i)
        pid = _wait_server(self.env)["pid"] if self.server else None  # a changed file of git-pf's stops it
        before = _children(pid)
        c0 = _children_cpu(pid)
        wall, cpu = _run(self.args, self.cwd, self.env)
        _settle(pid, before)
        self.walls.append(wall)
        self.cpus.append(cpu + _children_cpu(pid) - c0)

    def median(self) -> Timing:
        t = Timing(statistics.median(self.walls))
        t.cpu = statistics.median(self.cpus)
        return t


def _private_mib(pid: int) -> float | None:
    """The private memory of the children of ``pid`` (the server's spare, at rest), in MiB."""
    total = 0
    for child in _children(pid) or ():
        try:
            with open(f"/proc/{child}/smaps_rollup") as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith(("Private_Clean:", "Private_Dirty:")))
        except (OSError, ValueError, IndexError):
            return None
    return total / 1024 if total else None


def _status(env) -> dict:
    out = subprocess.run(["git", "pf", "server", "status", "--json"], env=env, capture_output=True, check=True)
    return json.loads(out.stdout)


def _wait_server(env, running: bool = True) -> dict:
    for _ in range(600):
        s = _status(env)
        if s["running"] == running:
            return s
        if running:  # a command starts one when none runs (one may have stopped: git-pf's files changed)
            subprocess.run(["git", "pf", "log", "-n", "1"], env=env, stdout=subprocess.DEVNULL, check=True)
        time.sleep(0.05)
    raise SystemExit("the command server did not " + ("start" if running else "stop"))


def setup(base: Path, files: int) -> dict:
    """The tree, a git-pf repository and a plain git repository of it, each with 25 images/commits;
    and, for merges, two sandboxes on branches main and side (git: a clone with both branches)."""
    from git_pf import Repo

    sb = base / "sb"
    paths = make_tree(sb, files, files * 1000)
    repo, _ = Repo.init(base / "pf")
    plain = base / "plain"
    sh("git", "init", "-q", "-b", "main", plain)
    genv = dict(git_env(), GIT_DIR=str(plain / ".git"), GIT_WORK_TREE=str(sb))
    ids = []
    for i in range(25):
        paths[i].write_bytes(paths[i].read_bytes() + b"\n")
        ids.append(repo.snapshot(sb, name="main", message=f"image {i}").image.id)
        sh("git", "add", "-A", env=genv)
        sh("git", "-c", "gc.auto=0", "commit", "-q", "-m", f"commit {i}", env=genv)
    # merges: git-pf images of two sandboxes; git's in a clone with a work tree
    mrepo, _ = Repo.init(base / "pfm")
    sbm, sbs = base / "sbm", base / "sbs"
    shutil.copytree(sb, sbm)
    shutil.copytree(sb, sbs)
    mrepo.snapshot(sbm, name="main", switch=True)
    mrepo.create_branch("side", "main")
    # the snapshot without the server takes a copy of the sandbox: an in-process snapshot of the
    # served one would replace the stat cache its watcher vouches for, and every served one would walk
    sb_off = base / "sb-off"
    shutil.copytree(sb, sb_off)
    repo.snapshot(sb_off, name="off")
    mg = base / "mg"
    sh("git", "clone", "-q", plain, mg)
    sh("git", "branch", "-q", "side", cwd=mg)
    return {"sb": sb, "paths": paths, "pf": base / "pf", "plain": plain, "genv": genv, "ids": ids,
            "pfm": base / "pfm", "mrepo": mrepo, "sbm": sbm, "sbs": sbs, "mg": mg, "sb_off": sb_off}


def python_client(base: Path) -> Path | None:
    """A directory whose ``git-pf`` is the Python client (pip's console script, which ``make`` keeps
    as ``git-pf-python`` beside the C client); None when git-pf is the Python client already."""
    script = Path(sys.executable).parent / "git-pf-python"
    if not script.exists():
        return None
    d = base / "python-client"
    d.mkdir(exist_ok=True)
    (d / "git-pf").unlink(missing_ok=True)
    (d / "git-pf").symlink_to(script)
    return d


def cases(s: dict, changed: int, runs: int) -> list[tuple[Case, Case | None, Case, float | None, Case | None]]:
    """(git-pf with the server, git-pf without it, git, goal as a ratio, git-pf with the server
    through the Python client) for every measure."""
    sb, paths, genv, ids = s["sb"], s["paths"], s["genv"], s["ids"]
    env, off = _env(s["pf"]), _env(s["pf"], GIT_PF_SERVER="0")
    pyenv = _env(s["pf"], s["python"]) if s["python"] else None

    def py(name, args):
        return Case(name, args, env=pyenv, server=True) if pyenv else None
    menv = _env(s["pfm"])
    rel = [p.relative_to(sb) for p in paths]

    off_paths = [s["sb_off"] / r for r in rel]

    def change(i: int, which: list = paths) -> None:
        for p in which[100 + i * changed: 100 + (i + 1) * changed]:
            p.write_bytes(p.read_bytes()[::-1] + b"!")
        time.sleep(0.2)  # files written in the last 100 ms before a snapshot are re-read next time

    def branches(i: int) -> None:
        """A change on side (one file) and another on main, as images (git-pf) and commits (git)."""
        mine, theirs = rel[len(rel) // 2 + 2 * i], rel[len(rel) // 2 + 1 + 2 * i]
        (s["sbs"] / theirs).write_bytes(b"side %d\n" % i)
        s["mrepo"].snapshot(s["sbs"], name="side")
        (s["sbm"] / mine).write_bytes(b"main %d\n" % i)
        s["mrepo"].snapshot(s["sbm"], name="main")
        (s["sbm"] / theirs).write_bytes(b"side %d\n" % i)  # what the merge brings, for the next round
        (s["sbs"] / mine).write_bytes(b"main %d\n" % i)
        mg = s["mg"]
        sh("git", "checkout", "-q", "side", cwd=mg)
        (mg / theirs).write_bytes(b"side %d\n" % i)
        sh("git", "-c", "gc.auto=0", "commit", "-q", "-am", f"side {i}", cwd=mg, env=git_env())
        sh("git", "checkout", "-q", "main", cwd=mg)
        (mg / mine).write_bytes(b"main %d\n" % i)
        sh("git", "-c", "gc.auto=0", "commit", "-q", "-am", f"main {i}", cwd=mg, env=git_env())

    snap = ["git", "pf", "snapshot", "--fs-root", str(sb), "--name", "main", "-q"]
    snap_off = ["git", "pf", "snapshot", "--fs-root", str(s["sb_off"]), "--name", "off", "-q"]
    pf_diff = ["git", "pf", "diff", ids[-6], ids[-1], "--stat"]
    return [
        (Case("snapshot", snap, env=env, before=change, server=True), Case("snapshot", snap_off, env=off,
                                                              before=lambda i: change(i, off_paths)),
         Case("git add -A && git commit -q", ["sh", "-c", "git add -A && git -c gc.auto=0 commit -q -m x"], env=genv),
         GOAL_SNAPSHOT, None),
        (Case("merge", ["git", "pf", "merge", "side"], env=menv, before=branches, server=True), None,
         Case("git merge", ["git", "-c", "gc.auto=0", "merge", "-q", "--no-edit", "side"], cwd=s["mg"], env=git_env()),
         GOAL_MERGE, None),
        (Case("log -n 20", ["git", "pf", "log", "-n", "20"], env=env, server=True), Case("log", ["git", "pf", "log", "-n", "20"], env=off),
         Case("git log -n 20", ["git", "log", "-n", "20"], env=genv), GOAL_READ, py("log", ["git", "pf", "log", "-n", "20"])),
        (Case("show", ["git", "pf", "show"], env=env, server=True), Case("show", ["git", "pf", "show"], env=off),
         Case("git show --stat", ["git", "show", "--stat"], env=genv), GOAL_READ, py("show", ["git", "pf", "show"])),
        (Case("diff --stat", pf_diff, env=env, server=True), Case("diff", pf_diff, env=off),
         Case("git diff --stat", ["git", "diff", "--stat", "HEAD~5", "HEAD"], env=genv), GOAL_READ, py("diff", pf_diff)),
        (Case("-h", ["git", "pf", "-h"], env=env, server=True), Case("-h", ["git", "pf", "-h"], env=off),
         Case("git -h", ["git", "-h"], env=genv), GOAL_READ, py("-h", ["git", "pf", "-h"])),
    ]


def bench(base: Path, runs: int, files: int, changed: int) -> list:
    s = setup(base, files)
    s["python"] = python_client(base)
    env = _env(s["pf"])
    menv = _env(s["pfm"])
    for e in (env, menv):  # start both servers, as a first command would
        subprocess.run(["git", "pf", "log", "-n", "1"], env=e, stdout=subprocess.DEVNULL, check=True)
        _wait_server(e)
    table = cases(s, changed, runs)
    nop_dir = base / "nop"  # the floor of every `git pf` command: git's dispatcher starting another program
    nop_dir.mkdir()
    (nop_dir / "git-nop").symlink_to(shutil.which("true") or "/bin/true")
    nop = Case("git nop", ["git", "nop"], env=dict(git_env(), PATH=f"{nop_dir}:{os.environ.get('PATH', '')}"))
    for i in range(runs):
        for served, plain_pf, git, _, py in table:
            served.once(i)
            git.once(i)
            for other in (plain_pf, py):
                if other is not None:
                    other.once(i)
        nop.once(i)
    rows = []
    for served, plain_pf, git, goal, py in table:
        t_pf, t_git = served.median(), git.median()
        ratio = t_pf / t_git
        rows += [(f"git pf {served.name}", _ms(t_pf), f"{ratio:.2f}x {git.name} ({_ms(t_git)})"),
                 ("", "", f"goal <= {goal:.1f}x  {verdict(ratio <= goal)}")]
        if plain_pf is not None:
            t_off = plain_pf.median()
            rows.append(("  without the server", _ms(t_off), f"{t_off / t_git:.2f}x"))
        if py is not None:
            t_py = py.median()
            rows.append(("  server, Python client", _ms(t_py), f"{t_py / t_git:.2f}x"))
    t_nop, t_help = nop.median(), table[-1][2].median()
    rows.append(("git nop (git's dispatcher, /bin/true)", _ms(t_nop),
                 f"{t_nop / t_help:.2f}x git -h: the floor of any git pf command"))
    st = _status(env)
    rows.append(("server memory at rest (RSS)", f"{st['memory_bytes'] / (1 << 20):.0f} MiB",
                 f"after {st['served']} commands"))
    spare = _private_mib(st["pid"])
    if spare is not None:
        rows.append(("  the spare child's own pages", f"{spare:.0f} MiB", "copied ahead of the next command"))
    firsts, seconds = [], []
    log = ["git", "pf", "log", "-n", "20"]
    for _ in range(3):  # the first command after the server went (idle exit), then the next one
        subprocess.run(["git", "pf", "server", "stop"], env=env, stdout=subprocess.DEVNULL, check=True)
        _wait_server(env, running=False)
        firsts.append(_run(log, env=env)[0])
        t0 = time.perf_counter()
        _wait_server(env)
        seconds.append((time.perf_counter() - t0, _run(log, env=env)[0]))
    rows.append(("first command after the server's exit", f"{statistics.median(firsts) * 1000:.0f} ms",
                 "in-process; it starts a server"))
    rows.append(("  server ready after", f"{statistics.median(s for s, _ in seconds) * 1000:.0f} ms",
                 f"then log -n 20: {statistics.median(t for _, t in seconds) * 1000:.0f} ms"))
    for e in (env, menv):
        subprocess.run(["git", "pf", "server", "stop"], env=e, stdout=subprocess.DEVNULL)
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=9)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--changed", type=int, default=10)
    args = ap.parse_args(argv)
    with workdir("cli") as base:
        report(f"git pf against git from the command line ({args.files} files, {args.changed} changed, "
               f"median of {args.runs} interleaved rounds)", bench(base, args.runs, args.files, args.changed))


if __name__ == "__main__":
    main()
