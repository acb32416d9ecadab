"""``make demo``: the main job end to end, narrated, in a temporary directory.

Snapshot an agent sandbox with its trace, effects and env; fork it three
ways, each fork mounted copy-on-write; let each fork try a fix through its
mount and snapshot it; merge the winning fork back; push with plain
``git push`` to a bare remote; clone it elsewhere and mount the image.
Then the debugger half (``git_pf.testing.demo_debugger``): record a small agent
against the offline fake LLM server, replay it bit-exact, fork a step and
run on; blame a failed run and write the HTML reports. Uses only the ``git pf`` command (and git), as a user would; needs
no network and no API key. Run: ``python -m git_pf.testing.demo [--keep]``.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from .demo_debugger import Debugger, run_debugger

BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\nassert add(2, 3) == 5, 'add is broken'\nprint('tests pass')\n"
FIXES = {
    1: "def add(a, b):\n    return a * b\n",
    2: "def add(a, b):\n    return a + b\n",
    3: "def add(a, b):\n    return b - a\n",
}


class Demo:
    """The story, one method per step; every step runs the real ``git pf`` command."""

    def __init__(self, base: Path):
        self.base = base
        self.work = base / "work"
        self.sandbox = base / "sandbox"
        self.forks = base / "forks"
        self.mounts: list[Path] = []
        self.env = dict(os.environ, GIT_AUTHOR_NAME="demo", GIT_AUTHOR_EMAIL="demo@example.com",
                        GIT_COMMITTER_NAME="demo", GIT_COMMITTER_EMAIL="demo@example.com",
                        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")

    def run(self, *args, cwd: Path | None = None) -> str:
        where = cwd or self.work
        shown = " ".join(shlex.quote(str(a)) for a in args)
        print(f"\n[{where.relative_to(self.base.parent)}]$ {shown}", flush=True)
        proc = subprocess.run([str(a) for a in args], cwd=where, env=self.env, capture_output=True, text=True)
        out = (proc.stdout + proc.stderr).rstrip()
        if out:
            print("\n".join("  " + line for line in out.splitlines()), flush=True)
        if proc.returncode != 0:
            raise SystemExit(f"demo step failed ({proc.returncode}): {shown}")
        return proc.stdout

    def say(self, text: str) -> None:
        print(f"\n== {text}", flush=True)

    def tests_pass(self, tree: Path) -> bool:
        return subprocess.run([sys.executable, "tests/test_calc.py"], cwd=tree, env=dict(self.env, PYTHONPATH=str(tree)),
                              capture_output=True, text=True).returncode == 0

    def snapshot_agent(self) -> None:
        self.say("1. an agent's sandbox, trace (messages + recorded LLM exchanges), effects, env and "
                 "process table become one image")
        self.run("git", "pf", "init", self.work, cwd=self.base)
        _write_agent_state(self.base)
        b = self.base
        self.run("git", "pf", "snapshot", "--fs-root", self.sandbox, "--agent", "demo-agent/1.0", "--messages",
                 b / "messages.jsonl", "--effects", b / "effects.jsonl", "--env", b / "env.json",
                 "--tape", b / "tape.jsonl", "--capture-procs", os.getpid(), "-m", "agent state: add() test failing")
        self.run("git", "pf", "show", "HEAD")

    def explore_in_forks(self) -> int:
        self.say("2. fork it three ways; each fork is mounted copy-on-write (one shared lower layer)")
        self.run("git", "pf", "fork", "main", "-n", "3", "--explore", "try a fix for add()", "--mount", self.forks)
        self.mounts += [self.forks / f"main-fork-{i}" for i in FIXES]
        self.run("git", "pf", "mounts")
        self.say("3. each fork tries a different fix inside its mount and runs the tests there")
        winner = None
        for i, fix in FIXES.items():
            mnt = self.forks / f"main-fork-{i}"
            (mnt / "calc.py").write_text(fix)
            ok = self.tests_pass(mnt)
            print(f"  main-fork-{i}: {'tests pass' if ok else 'tests fail'}")
            winner = winner or (i if ok else None)
        assert winner is not None
        fork_msgs = self.base / "fork-messages.jsonl"
        fork_msgs.write_text((self.base / "messages.jsonl").read_text() + json.dumps(
            {"role": "assistant", "content": f"Fork {winner}: add() must use +, not -. Changed calc.py; tests pass."}) + "\n")
        self.run("git", "pf", "snapshot", "--mount", self.forks / f"main-fork-{winner}", "--messages", fork_msgs,
                 "-m", "fix add(): use +")
        self.unmount_all("--discard")
        return winner

    def main_moves_on(self) -> None:
        self.say("meanwhile the main line moved on: a note in the sandbox, one more message, one more effect")
        (self.sandbox / "NOTES.md").write_text("fixing add(): candidates tried in forks\n")
        _append_jsonl(self.base / "messages.jsonl", {"role": "assistant", "content": "While the forks run, I wrote NOTES.md."})
        _append_jsonl(self.base / "effects.jsonl", {
            "ts": "2026-11-22T10:05:00Z", "tool": "write_file", "args": {"path": "NOTES.md"}, "result": "ok",
            "idempotency_key": "write-notes", "side_effect_class": "idempotent"})
        self.run("git", "pf", "snapshot", "--fs-root", self.sandbox, "--name", "main", "--messages",
                 self.base / "messages.jsonl", "--effects", self.base / "effects.jsonl", "-m", "notes while the forks explore")

    def merge_winner(self, winner: int) -> None:
        self.say("4. merge the winning fork back into main (every layer, three-way)")
        self.run("git", "pf", "merge", f"main-fork-{winner}", "--into", "main")
        self.run("git", "pf", "log", "--graph", "main")
        self.run("git", "pf", "diff", "main^1", "main")

    def push(self) -> Path:
        self.say("5. push with plain `git push` to a bare remote")
        remote = self.base / "remote.git"
        self.run("git", "init", "-q", "--bare", remote, cwd=self.base)
        self.run("git", "remote", "add", "origin", remote)
        (self.work / "README.md").write_text("agent project\n")
        self.run("git", "add", "README.md")
        self.run("git", "commit", "-q", "-m", "project readme")
        self.run("git", "pf", "install", "--remote", "origin")
        self.run("git", "push", "origin")
        return remote

    def clone_and_mount(self, remote: Path) -> None:
        self.say("6. clone it elsewhere and mount the merged image")
        elsewhere, mnt = self.base / "elsewhere", self.base / "mnt"
        self.run("git", "pf", "clone", remote, elsewhere, cwd=self.base)
        mnt.mkdir()
        self.run("git", "pf", "mount", "main", mnt, cwd=elsewhere)
        self.mounts.append(mnt)
        print("  calc.py in the mounted image:\n    " + (mnt / "calc.py").read_text().replace("\n", "\n    "))
        print(f"  tests in the mounted image: {'pass' if self.tests_pass(mnt) else 'FAIL'}")
        size = (mnt / "data" / "embeddings.bin").stat().st_size
        print(f"  data/embeddings.bin: {size} bytes, fetched lazily from the remote's side store")
        self.run("git", "pf", "umount", mnt, cwd=elsewhere)
        self.mounts.clear()
        self.run("git", "pf", "fsck", cwd=elsewhere)

    def unmount_all(self, *flags: str) -> None:
        for mnt in self.mounts:
            self.run("git", "pf", "umount", *flags, mnt)
        self.mounts.clear()


def _append_jsonl(path: Path, record: dict) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def _write_agent_state(base: Path) -> None:
    sb = base / "sandbox"
    (sb / "tests").mkdir(parents=True)
    (sb / "calc.py").write_text(BUGGY)
    (sb / "tests" / "test_calc.py").write_text(TEST)
    (sb / "data").mkdir()
    (sb / "data" / "embeddings.bin").write_bytes(os.urandom(3 * 1024 * 1024))  # goes to the side store
    (base / "messages.jsonl").write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "The add() test fails. Fix calc.py."},
        {"role": "assistant", "content": "I will look at calc.py and try candidate fixes in parallel."},
    ]) + "\n")
    (base / "effects.jsonl").write_text(json.dumps({
        "ts": "2026-11-22T10:00:00Z", "tool": "shell", "args": {"cmd": "pytest"}, "result": {"exit": 1},
        "idempotency_key": "run-1", "side_effect_class": "pure"}) + "\n")
    (base / "tape.jsonl").write_text(json.dumps({  # one recorded model call; its API key is redacted
        "request": {"model": "demo-model", "headers": {"Authorization": "Bearer sk-demo-not-a-real-key-123456"},
                    "messages": [{"role": "user", "content": "The add() test fails. Fix calc.py."}]},
        "response": {"content": "I will look at calc.py and try candidate fixes in parallel."},
        "draws": [{"temperature": 0.7, "seed": 1234}]}) + "\n")
    (base / "env.json").write_text(json.dumps({"cwd": "/sandbox", "env": {
        "PATH": "/usr/bin", "OPENAI_API_KEY": "sk-demo-not-a-real-key-123456"}}))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    base = Path(tempfile.mkdtemp(prefix="git-pf-demo-")) / "demo"
    base.mkdir()
    demo = Demo(base)
    debugger = Debugger(demo)
    try:
        demo.snapshot_agent()
        winner = demo.explore_in_forks()
        demo.main_moves_on()
        demo.merge_winner(winner)
        demo.clone_and_mount(demo.push())
        demo.say("done: snapshot -> fork -> mount -> merge -> git push -> clone -> mount")
        run_debugger(debugger)
        return 0
    finally:
        debugger.stop()  # a failed step must not leave the fake LLM server running
        for mnt in demo.mounts:  # a failed step must not leave mounts behind
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        if "--keep" in argv:
            print(f"\n(kept {base})")
        else:
            shutil.rmtree(base.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
