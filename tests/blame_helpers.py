"""Helpers of the blame tests: a tiny scripted agent (run as a script: ``python blame_helpers.py``)
and a fake model that answers by step, so a trial gone live hears what the recording heard.

The agent sends ``step i`` as a user message to ``$OPENAI_BASE_URL/chat/completions`` (the whole
conversation each time), writes each reply to ``$GIT_PF_WORLD/out-<i>.txt`` and prints the last one.
Test helper only: runs as a real child process behind the real proxy."""
from __future__ import annotations

import json
import os
import sys
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve()
AGENT = [sys.executable, str(HERE)]
# Step 3's one-word reply is the failure: the oracle fails when an out file says BUG.
REPLIES = ["plan the work", "read the task", "BUG", "all done now"]
ORACLE = "! grep -q BUG out-*.txt"


def by_step(replies: list[str]):
    """A FakeLLM script: the reply of step i (the number of user messages in the request)."""
    def pick(api, request, n):
        i = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
        return replies[i - 1] if 0 < i <= len(replies) else f"reply {i}"
    return pick


def record(run_pf, root: Path, fake, name: str = "run", steps: int = 4):
    world = root.parent / f"{name}-world"
    world.mkdir(exist_ok=True)
    return run_pf("record", "--name", name, "--fs-root", world, "--upstream", fake.url, "--", *AGENT,
                  cwd=root, env={"BLAME_AGENT_STEPS": str(steps)})


def fix(text, rng):
    """A ``--perturb module:function`` plug-in: the reply with its BUG fixed."""
    return text.replace("BUG", "fixed")


def messy_world(world: Path) -> Path:
    """Fill ``world`` with what ``messy`` changes: files, an executable, a symlink, ignore rules,
    a directory with an xattr."""
    (world / "sub").mkdir(parents=True)
    (world / "a.txt").write_text("a\n")
    (world / "sub" / "b.txt").write_text("b\n")
    (world / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(world / "run.sh", 0o755)
    (world / ".gitignore").write_text("*.log\n")
    (world / "link").symlink_to("a.txt")
    os.setxattr(world / "sub", "user.d", b"dv")
    return world


def seen_world(world: Path) -> str:
    """What a checkout decides of ``world`` (every path, and the directory itself), as text."""
    from world_helpers import describe

    st = os.lstat(world)
    top = (oct(st.st_mode), sorted((n, os.getxattr(world, n)) for n in os.listxattr(world)))
    return repr((top, sorted(describe(world).items())))


def messy() -> int:
    """The agent, saying first (in a new file under ``$SEEN``) what world it starts in, and leaving
    its world changed every way a checkout's differs from another: written, deleted, chmodded,
    an ignored file, a fifo, xattrs, a new directory."""
    world = Path(os.environ["GIT_PF_WORLD"])
    n = len(list(Path(os.environ["SEEN"]).iterdir()))
    (Path(os.environ["SEEN"]) / f"{n:03d}-{os.getpid()}").write_text(seen_world(world))
    code = main()
    if os.environ.get("PIDS"):  # something left running, which must not outlive the trial
        import subprocess
        left = subprocess.Popen(["sleep", "300"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        (Path(os.environ["PIDS"]) / str(left.pid)).touch()
    (world / "a.txt").write_text("A\n")  # same size
    (world / "sub" / "b.txt").unlink()
    os.chmod(world / "run.sh", 0o600)
    (world / "junk.log").write_text("ignored\n")
    (world / "ignored.log").mkdir()
    (world / "ignored.log" / "in").write_text("in\n")
    os.mkfifo(world / "pipe")
    os.setxattr(world / "a.txt", "user.k", b"v")
    os.setxattr(world / "sub", "user.d", b"changed")
    os.setxattr(world, "user.top", b"1")
    os.chmod(world / "sub", 0o500)
    os.unlink(world / "link")
    os.symlink("sub", world / "link")
    return code


def main() -> int:
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    world = Path(os.environ["GIT_PF_WORLD"])
    messages = [{"role": "system", "content": "You are a test agent."}]
    reply = ""
    for i in range(1, int(os.environ.get("BLAME_AGENT_STEPS", "4")) + 1):
        messages.append({"role": "user", "content": f"step {i}"})
        req = urllib.request.Request(base + "/chat/completions", method="POST",
                                     data=json.dumps({"model": "fake-model", "messages": messages}).encode(),
                                     headers={"content-type": "application/json", "authorization": "Bearer sk-test"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            reply = json.load(resp)["choices"][0]["message"].get("content") or ""
        messages.append({"role": "assistant", "content": reply})
        (world / f"out-{i}.txt").write_text(reply)
    print(reply)
    return 0


if __name__ == "__main__":
    sys.exit(messy() if sys.argv[1:] == ["messy"] else main())
