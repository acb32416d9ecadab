"""``make demo``: the main job end to end, narrated, in a temporary directory.

Snapshot an agent sandbox with its trace, effects and env; fork it three
ways, each fork mounted copy-on-write; let each fork try a fix through its
mount and snapshot it; merge the winning fork back; push with plain
``git push`` to a bare remote; clone it elsewhere and mount the image.
Uses only the ``git pf`` command (and git), as a user would; needs no
network and no API key. Run: ``python -m git_pf.demo [--keep]``.
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

BUGGY = "def add(a, b):\n    return a - b\n"
TEST = "from calc import add\nassert add(2, 3) == 5, 'add is broken'\nprint('tests pass')\n"
FIXES = {
    1: "def add(a, b):\n    return a * b\n",
    2: "def add(a, b):\n    return a + b\n",
    3: "def add(a, b):\n    return b - a\n",
}


class Demo:
    def __init__(self, base: Path):
        self.base = base
        self.env = dict(os.environ, GIT_AUTHOR_NAME="demo", GIT_AUTHOR_EMAIL="demo@example.com",
                        GIT_COMMITTER_NAME="demo", GIT_COMMITTER_EMAIL="demo@example.com",
                        PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")

    def run(self, *args, cwd: Path | None = None, check: bool = True, show: bool = True) -> str:
        where = cwd or self.base
        shown = " ".join(shlex.quote(str(a)) for a in args)
        print(f"\n[{where.relative_to(self.base.parent) if where != self.base else self.base.name}]$ {shown}", flush=True)
        proc = subprocess.run([str(a) for a in args], cwd=where, env=self.env, capture_output=True, text=True)
        out = (proc.stdout + proc.stderr).rstrip()
        if show and out:
            print("\n".join("  " + line for line in out.splitlines()), flush=True)
        if check and proc.returncode != 0:
            raise SystemExit(f"demo step failed ({proc.returncode}): {shown}")
        return proc.stdout

    def say(self, text: str) -> None:
        print(f"\n== {text}", flush=True)


def _write_agent_state(base: Path) -> Path:
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
    (base / "env.json").write_text(json.dumps({"cwd": "/sandbox", "env": {
        "PATH": "/usr/bin", "OPENAI_API_KEY": "sk-demo-not-a-real-key-123456"}}))
    return sb


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    base = Path(tempfile.mkdtemp(prefix="git-pf-demo-")) / "demo"
    base.mkdir()
    d = Demo(base)
    mounts: list[Path] = []
    try:
        d.say("1. an agent's sandbox, trace, effects and env become one image")
        work = base / "work"
        d.run("git", "pf", "init", work)
        sb = _write_agent_state(base)
        d.run("git", "pf", "snapshot", "--fs-root", sb, "--agent", "demo-agent/1.0", "--messages",
              base / "messages.jsonl", "--effects", base / "effects.jsonl", "--env", base / "env.json",
              "-m", "agent state: add() test failing", cwd=work)
        d.run("git", "pf", "show", "HEAD", cwd=work)

        d.say("2. fork it three ways; each fork is mounted copy-on-write (one shared lower layer)")
        forks_dir = base / "forks"
        d.run("git", "pf", "fork", "main", "-n", "3", "--explore", "try a fix for add()", "--mount", forks_dir, cwd=work)
        for i in FIXES:
            mounts.append(forks_dir / f"main-fork-{i}")
        d.run("git", "pf", "mounts", cwd=work)

        d.say("3. each fork tries a different fix inside its mount and runs the tests there")
        winner = None
        for i, fix in FIXES.items():
            mnt = forks_dir / f"main-fork-{i}"
            (mnt / "calc.py").write_text(fix)
            ok = subprocess.run([sys.executable, "tests/test_calc.py"], cwd=mnt, env=dict(d.env, PYTHONPATH=str(mnt)),
                                capture_output=True, text=True).returncode == 0
            print(f"  main-fork-{i}: {'tests pass' if ok else 'tests fail'}")
            if ok and winner is None:
                winner = i
        assert winner is not None
        fork_msgs = base / "fork-messages.jsonl"
        fork_msgs.write_text((base / "messages.jsonl").read_text() + json.dumps(
            {"role": "assistant", "content": f"Fork {winner}: add() must use +, not -. Changed calc.py; tests pass."}) + "\n")
        d.run("git", "pf", "snapshot", "--mount", forks_dir / f"main-fork-{winner}", "--messages", fork_msgs,
              "-m", "fix add(): use +", cwd=work)
        for mnt in mounts:
            d.run("git", "pf", "umount", "--discard", mnt, cwd=work)
        mounts.clear()

        d.say("meanwhile the main line moved on: a note in the sandbox, one more message, one more effect")
        (sb / "NOTES.md").write_text("fixing add(): candidates tried in forks\n")
        with open(base / "messages.jsonl", "a") as f:
            f.write(json.dumps({"role": "assistant", "content": "While the forks run, I wrote NOTES.md."}) + "\n")
        with open(base / "effects.jsonl", "a") as f:
            f.write(json.dumps({"ts": "2026-11-22T10:05:00Z", "tool": "write_file", "args": {"path": "NOTES.md"},
                                "result": "ok", "idempotency_key": "write-notes", "side_effect_class": "idempotent"}) + "\n")
        d.run("git", "pf", "snapshot", "--fs-root", sb, "--name", "main", "--messages", base / "messages.jsonl",
              "--effects", base / "effects.jsonl", "-m", "notes while the forks explore", cwd=work)

        d.say("4. merge the winning fork back into main (every layer, three-way)")
        d.run("git", "pf", "merge", f"main-fork-{winner}", "--into", "main", cwd=work)
        d.run("git", "pf", "log", "--graph", "main", cwd=work)
        d.run("git", "pf", "diff", "main^1", "main", cwd=work)

        d.say("5. push with plain `git push` to a bare remote")
        remote = base / "remote.git"
        d.run("git", "init", "-q", "--bare", remote)
        d.run("git", "remote", "add", "origin", remote, cwd=work)
        (work / "README.md").write_text("agent project\n")
        d.run("git", "add", "README.md", cwd=work)
        d.run("git", "commit", "-q", "-m", "project readme", cwd=work)
        d.run("git", "pf", "install", "--remote", "origin", cwd=work)
        d.run("git", "push", "origin", cwd=work)

        d.say("6. clone it elsewhere and mount the merged image")
        elsewhere = base / "elsewhere"
        d.run("git", "pf", "clone", remote, elsewhere)
        mnt = base / "mnt"
        mnt.mkdir()
        d.run("git", "pf", "mount", "main", mnt, cwd=elsewhere)
        mounts.append(mnt)
        print("  calc.py in the mounted image:\n    " + (mnt / "calc.py").read_text().replace("\n", "\n    "))
        subprocess.run([sys.executable, "tests/test_calc.py"], cwd=mnt, env=dict(d.env, PYTHONPATH=str(mnt)), check=True)
        size = (mnt / "data" / "embeddings.bin").stat().st_size
        print(f"  data/embeddings.bin: {size} bytes, fetched lazily from the remote's side store")
        d.run("git", "pf", "umount", mnt, cwd=elsewhere)
        mounts.clear()
        d.run("git", "pf", "fsck", cwd=elsewhere)
        d.say("done: snapshot -> fork -> mount -> merge -> git push -> clone -> mount")
        return 0
    finally:
        for mnt in mounts:
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True)
        if "--keep" in argv:
            print(f"\n(kept {base})")
        else:
            shutil.rmtree(base.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
