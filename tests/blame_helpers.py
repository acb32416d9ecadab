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
    sys.exit(main())
