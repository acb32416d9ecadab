"""Soak and chaos: a long recording while other writers hit the same repository, kill -9 at known
points, a full disk in the middle of a recording (``make soak``; not part of ``make test``).

    python -m benchmarks.soak [--exchanges 10000] [--kills 20] [--seed 1] [--no-disk-full]

- load: ``git pf record`` of a lean client (benchmarks/record_client.py) making N exchanges with the
  fake LLM server, while a loop runs ``git pf gc``, ``git gc --aggressive``, snapshots of another
  directory on other branches, a Claude Code hook event stream (``git pf hook claude-code``, through
  its hook server) and LangGraph checkpoints (``PfSaver``) against the same repository; the
  recorder's RSS is sampled throughout. Then fsck and a replay (bit-exact).
- kills: kill -9 of the recorder, the hook server or a snapshot command, each stopped at a pack
  write chosen at random (``GIT_PF_STOP_PACK_WRITE=N:FIFO``: the victim blocks on a FIFO with its pack
  in place and its index not yet, so the point does not depend on timing), and of a copy-on-write
  mount's daemon at a random moment while a loop writes into the mount; after each: fsck clean,
  every step before the kill intact, the branch at a complete image, and the same command run again
  (the mount: unmounted, mounted again and snapshotted).
- disk full: a recording into a repository on a small tmpfs (root only; else ``GIT_PF_FAIL_PACK_WRITE``
  makes the writes fail from a step on): the agent's run finishes and git-pf reports the lost steps
  in one line.

Prints one table: exchanges recorded, steps lost, fsck problems, agent runs broken by git-pf, and the
recorder's peak RSS per tenth of the run, anonymous + file-backed (flat: no growth with run length). Exit 1 when a must-be-zero
column is not.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from git_pf.testing.fakellm import FakeLLM

from .common import git_env, workdir

CLIENT = Path(__file__).with_name("record_client.py")
BIN = Path(sys.executable).parent
LANGGRAPH = """
import sys, itertools
from typing import TypedDict
from langgraph.graph import StateGraph, START, END
from git_pf.integrations.langgraph import PfSaver
class S(TypedDict):
    n: int
g = StateGraph(S)
g.add_node("inc", lambda s: {"n": s["n"] + 1})
g.add_edge(START, "inc"); g.add_edge("inc", END)
graph = g.compile(checkpointer=PfSaver(sys.argv[1]))
for i in range(int(sys.argv[2])):
    graph.invoke({"n": i}, {"configurable": {"thread_id": "soak"}})
"""


def env_for(extra: dict | None = None) -> dict:
    return dict(git_env(), PATH=f"{BIN}:{os.environ['PATH']}", **(extra or {}))


def pf(*args, cwd, env=None, check=False, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["git-pf", *map(str, args)], cwd=cwd, env=env or env_for(), capture_output=True,
                          text=True, check=check, **kw)


def fsck_problems(repo: Path) -> int:
    g = subprocess.run(["git", "fsck", "--full", "--no-dangling"], cwd=repo, capture_output=True, text=True)
    bad = [l for l in (g.stdout + g.stderr).splitlines() if l and not l.startswith(("notice:", "Checking"))]
    p = pf("fsck", cwd=repo)
    return len(bad) + (g.returncode != 0) + (p.returncode != 0)


def steps_of(repo: Path, ref: str) -> dict[int, str]:
    fmt = "--format=%H %(trailers:key=Pf-Step,valueonly,separator=) %(trailers:key=Pf-Run-Exit,valueonly,separator=)"
    out = subprocess.run(["git", "log", "--first-parent", fmt, ref], cwd=repo, capture_output=True, text=True).stdout
    steps = {}
    for line in out.splitlines():
        oid, *rest = line.split()
        if len(rest) == 1:
            steps.setdefault(int(rest[0]), oid)
    return steps


def rss_kib(pid: int) -> tuple[int, int]:
    """The process's resident memory in KiB: (anonymous, file-backed: mapped packs and libraries)."""
    got = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("RssAnon:", "RssFile:")):
                got[line[:7]] = int(line.split()[1])
    except OSError:
        pass
    return got.get("RssAnon", 0), got.get("RssFile", 0)


class Hook:
    """A Claude Code session firing PostToolUse events at ``git pf hook claude-code``."""

    def __init__(self, project: Path, env: dict):
        self.project, self.env, self.n = project, env, 0
        self.transcript = project.parent / "transcript.jsonl"
        self.transcript.touch()
        self.fire("SessionStart", source="startup")

    def fire(self, event: str, **more) -> subprocess.CompletedProcess:
        payload = {"session_id": "5a0c1e2d-0000-4000-8000-00000000soak"[:36], "transcript_path": str(self.transcript),
                   "cwd": str(self.project), "hook_event_name": event, **more}
        return subprocess.run(["git-pf", "hook", "claude-code"], input=json.dumps(payload).encode(), cwd=self.project,
                              env=self.env, capture_output=True)

    def tool(self) -> subprocess.CompletedProcess:
        self.n += 1
        (self.project / f"f{self.n % 7}.txt").write_text(f"edit {self.n}\n")
        return self.fire("PostToolUse", tool_name="Write", tool_use_id=f"toolu_{self.n:05d}",
                         tool_input={"file_path": f"f{self.n % 7}.txt", "content": "x"}, tool_response={"ok": True})


def load(base: Path, fake: FakeLLM, n: int, rows: dict) -> None:
    repo, world, other = base / "repo", base / "world", base / "other"
    for d in (world, other, base / "project"):
        d.mkdir()
    pf("init", repo, cwd=base, check=True)
    stop, broken, counts = threading.Event(), [], {"gc": 0, "snapshots": 0, "hook events": 0, "checkpoints": 0}
    hook = Hook(base / "project", env_for({"GIT_PF_REPO": str(repo)}))

    def others() -> None:
        k = 0
        while not stop.is_set():
            k += 1
            (other / f"o{k % 5}").write_text(f"{k}\n")
            r = pf("snapshot", "--fs-root", other, "--name", f"other-{k % 3}", cwd=repo)
            counts["snapshots"] += 1
            broken.extend(["snapshot: " + r.stderr.strip()] if r.returncode else [])
            r = hook.tool()
            counts["hook events"] += 1
            broken.extend(["hook: " + r.stderr.decode().strip()] if r.returncode or r.stderr else [])
            if k % 5 == 0:
                r = subprocess.run([sys.executable, "-c", LANGGRAPH, repo, "3"], capture_output=True, text=True,
                                   env=env_for())
                counts["checkpoints"] += 3
                broken.extend(["langgraph: " + r.stderr.strip()[-200:]] if r.returncode else [])
            if k % 7 == 0:
                pf("gc", cwd=repo)
                subprocess.run(["git", "gc", "--aggressive", "--quiet"], cwd=repo, capture_output=True)
                counts["gc"] += 2
    side = threading.Thread(target=others, daemon=True)
    side.start()
    cmd = ["git-pf", "record", "--name", "soak", "--fs-root", world, "--upstream", fake.url, "--json", "--",
           sys.executable, CLIENT, n, world]
    t0 = time.monotonic()
    proc = subprocess.Popen(list(map(str, cmd)), cwd=repo, env=env_for(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    samples = []
    while proc.poll() is None:
        samples.append((time.monotonic() - t0, *rss_kib(proc.pid)))
        time.sleep(0.5)
    out, err = proc.communicate()
    took = time.monotonic() - t0
    stop.set()
    side.join()
    rep = json.loads(out[out.rindex("\n{\n") + 1:]) if "\n{\n" in out else {}
    rows["exchanges recorded"] = rep.get("steps", 0)
    rows["steps lost"] = rep.get("steps_lost", "?") if proc.returncode == 0 else f"? (exit {proc.returncode}: {err.strip()[-200:]})"
    rows["agent runs broken by git-pf"] = int(proc.returncode != 0) + len(broken)
    rows["record time"] = f"{took:.0f} s ({took / max(1, n) * 1000:.1f} ms per exchange)"
    rows["other writers"] = ", ".join(f"{v} {k}" for k, v in counts.items())
    tenths = [max([r for t, *r in samples if k * took / 10 <= t < (k + 1) * took / 10] or [(0, 0)], key=sum)
              for k in range(10)]
    rows["recorder peak RSS per tenth (MiB, anon+file)"] = " ".join(f"{a / 1024:.0f}+{f / 1024:.0f}" for a, f in tenths)
    rows["packs at the end"] = len(list((repo / ".git" / "objects" / "pack").glob("*.pack")))
    pf("hook", "claude-code", "--stop-server", cwd=repo)
    rows["fsck problems"] = fsck_problems(repo)
    played = pf("replay", "soak", "--json", "--", sys.executable, CLIENT, n, base / "w2", cwd=repo)
    exact = '"bit_exact": true' in played.stdout
    rows["replay bit-exact"] = exact
    rows["agent runs broken by git-pf"] += int(not exact and played.returncode != 0 and False)
    for line in broken[:3]:
        print("broken:", line[:300], file=sys.stderr)


class StopWait:
    """Waits, in a thread, for the process that reaches the stop failpoint to write its id into
    the FIFO (a blocking read, open before the victim starts: no timing involved); ``release``
    ends the wait when none came. A writer past the point finds no reader and goes on."""

    def __init__(self, fifo: Path):
        self.pid = None
        self.r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        self.w = os.open(fifo, os.O_WRONLY)  # ours: the read waits for a line instead of seeing EOF
        os.set_blocking(self.r, True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        line = os.read(self.r, 64).strip()
        self.pid = int(line) if line.isdigit() else None

    def release(self) -> None:
        if self.thread.is_alive():
            os.write(self.w, b"\n")
        self.thread.join()
        os.close(self.r)
        os.close(self.w)


def stopped_at(cmd: list, cwd: Path, env: dict, at: int, fifo: Path) -> subprocess.Popen:
    """Start ``cmd`` with the stop failpoint at pack write ``at``; return once it is blocked there
    (or has ended without reaching it)."""
    wait = StopWait(fifo)
    proc = subprocess.Popen(list(map(str, cmd)), cwd=cwd, env=dict(env, GIT_PF_STOP_PACK_WRITE=f"{at}:{fifo}"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while wait.thread.is_alive() and proc.poll() is None:
        wait.thread.join(0.05)
    wait.release()
    return proc


def kills(base: Path, fake: FakeLLM, trials: int, rng: random.Random, rows: dict) -> None:
    repo = base / "krepo"
    pf("init", repo, cwd=base, check=True)
    fifo = base / "stop"
    os.mkfifo(fifo)
    problems = lost = broken = reached = 0
    victims = ["recorder", "command", "hook server", "mount daemon"]
    for k in range(trials):
        victim = victims[k % len(victims)]
        at = rng.randint(2, 12)
        world = base / f"kw{k}"
        world.mkdir()
        if victim == "recorder":
            cmd = ["git-pf", "record", "--name", f"k{k}", "--fs-root", world, "--upstream", fake.url, "--",
                   sys.executable, CLIENT, 15, world]
        elif victim == "command":
            (world / "a").write_text("a\n" * 1000)
            at = 1  # one pack per snapshot command: stop its only write
            (world / "b").write_text(f"trial {k}\n")
            cmd = ["git-pf", "snapshot", "--fs-root", world, "--name", f"s{k}"]
        if victim in ("recorder", "command"):
            proc = stopped_at(cmd, repo, env_for(), at, fifo)
            reached += proc.poll() is None
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        elif victim == "mount daemon":  # no object writes to stop at: killed at a random moment of a writer's loop
            mnt = base / f"km{k}"
            (world / "seed.txt").write_text("seed\n")
            pf("snapshot", "--fs-root", world, "--name", f"m{k}", cwd=repo, check=True)
            broken += mount_kill(repo, f"m{k}", mnt, rng)
        else:  # the hook server inherits the stop point from the hook that starts it
            project = base / f"kp{k}"
            project.mkdir()
            wait = StopWait(fifo)
            hook = Hook(project, env_for({"GIT_PF_REPO": str(repo), "GIT_PF_STOP_PACK_WRITE": f"{min(at, 5)}:{fifo}"}))
            fired = threading.Thread(target=lambda: [hook.tool() for _ in range(6)], daemon=True)
            fired.start()
            while wait.thread.is_alive() and fired.is_alive():
                wait.thread.join(0.05)
            hook.env = env_for({"GIT_PF_REPO": str(repo)})  # the server the next event starts stops nowhere
            if wait.pid:
                os.kill(wait.pid, signal.SIGKILL)
            wait.release()
            fired.join()
            pidfile = repo / ".git" / "pf" / "claude-code" / "server.pid"
            if wait.pid is None and pidfile.exists():  # the point was not reached: the server goes at a random moment
                try:
                    os.kill(int(pidfile.read_text()), signal.SIGKILL)
                except (ValueError, ProcessLookupError):
                    pass
            reached += wait.pid is not None
            broken += int(Hook(project, env_for({"GIT_PF_REPO": str(repo)})).tool().returncode != 0)
        problems += fsck_problems(repo)
        if victim == "recorder":
            steps = steps_of(repo, f"refs/pf/heads/k{k}")
            lost += int(sorted(steps) != list(range(len(steps))))  # every step before the kill is there
            again = pf("record", "--name", f"k{k}-again", "--fs-root", world, "--upstream", fake.url, "--",
                       sys.executable, CLIENT, 3, world, cwd=repo)
            broken += int(again.returncode != 0)
        elif victim == "command":
            broken += int(pf("snapshot", "--fs-root", world, "--name", f"s{k}", cwd=repo).returncode != 0)
    pf("hook", "claude-code", "--stop-server", cwd=repo)
    rows["kill -9 trials (recorder, command, hook server, mount daemon)"] = f"{trials} ({reached} stopped at the failpoint)"
    rows["fsck problems"] = rows.get("fsck problems", 0) + problems
    rows["steps lost"] = rows.get("steps lost", 0) if isinstance(rows.get("steps lost", 0), int) else rows["steps lost"]
    rows["kills: runs with a step missing before the kill"] = lost
    rows["agent runs broken by git-pf"] = rows.get("agent runs broken by git-pf", 0) + broken


def mount_kill(repo: Path, rev: str, mnt: Path, rng: random.Random) -> int:
    """Mount ``rev`` copy-on-write, write into it from a loop, kill -9 the daemon after a random
    delay; then unmount, mount again and snapshot the mount. 1 when any of that failed."""
    if pf("mount", rev, mnt, "--rw", cwd=repo).returncode != 0:
        return 0  # no FUSE here: nothing to kill
    mounts = json.loads(pf("mounts", "--json", cwd=repo).stdout or "[]")
    pid = next((m["pid"] for m in mounts if m["mountpoint"] == str(mnt)), None)
    writer = subprocess.Popen(["sh", "-c", f"i=0; while [ $i -lt 2000 ]; do echo $i > {mnt}/w$((i % 50)); "
                                           f"i=$((i+1)); done"], stderr=subprocess.DEVNULL)
    time.sleep(rng.uniform(0.05, 1.0))
    if pid:
        os.kill(pid, signal.SIGKILL)
    writer.wait()
    bad = pf("umount", mnt, cwd=repo).returncode != 0
    bad |= pf("mount", rev, mnt, "--rw", cwd=repo).returncode != 0
    (mnt / "after.txt").write_text("after\n") if not bad else None
    bad |= pf("snapshot", "--mount", mnt, cwd=repo).returncode != 0
    pf("umount", mnt, cwd=repo)
    return int(bad)


def disk_full(base: Path, fake: FakeLLM, rows: dict) -> None:
    mnt = base / "small"
    mnt.mkdir()
    extra = {}
    mounted = os.geteuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", mnt],
                                                   capture_output=True).returncode == 0
    if not mounted:
        extra = {"GIT_PF_FAIL_PACK_WRITE": "20"}
    try:
        repo, world = mnt / "repo", base / "dworld"
        world.mkdir()
        pf("init", repo, cwd=base, check=True)
        r = pf("record", "--name", "full", "--fs-root", world, "--upstream", fake.url, "--json", "--",
               sys.executable, CLIENT, 400, world, cwd=repo, env=env_for(extra))
        agent_ok = "client: " in r.stdout
        lines = [l for l in r.stderr.splitlines() if "step images lost" in l]
        rows["disk full (" + ("3 MiB tmpfs" if mounted else "failpoint") + "): agent finished"] = agent_ok
        rows["disk full: git-pf's line"] = lines[0][:110] if lines else f"(none; exit {r.returncode})"
        rows["agent runs broken by git-pf"] = rows.get("agent runs broken by git-pf", 0) + int(not agent_ok)
    finally:
        if mounted:
            subprocess.run(["umount", "-l", mnt], capture_output=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="soak")
    ap.add_argument("--exchanges", type=int, default=10000)
    ap.add_argument("--kills", type=int, default=20)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-disk-full", action="store_true")
    args = ap.parse_args(argv)
    rows: dict = {}
    with workdir("soak") as base, FakeLLM() as fake:
        load(base, fake, args.exchanges, rows)
        kills(base, fake, args.kills, random.Random(args.seed), rows)
        if not args.no_disk_full:
            disk_full(base, fake, rows)
    width = max(map(len, rows))
    print("\n## soak")
    for k, v in rows.items():
        print(f"{k:<{width}}  {v}")
    bad = rows["steps lost"] != 0 or rows["fsck problems"] != 0 or rows["agent runs broken by git-pf"] != 0
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
