"""A test agent on the real openai SDK whose tools are not idempotent (run as a script:
``python tool_agent.py``): each step's reply is an instruction, ``append: TEXT`` (a line added to
CHANGELOG.md), ``replace: OLD => NEW`` (a str_replace edit of notes.md that fails once OLD is gone),
``commit: MSG`` (``git commit`` in a git repository inside the world), ``mkdir: DIR`` (fails when it
exists) or plain text. Its world is ``$GIT_PF_WORLD``; ``TOOL_AGENT_STEPS`` steps (default 6).
``TOOL_AGENT_EXTRA=N`` writes one extra byte to CHANGELOG.md just before request N (a broken agent);
``TOOL_AGENT_ABS=PATH`` makes every tool write by that absolute path instead of the world's;
``TOOL_AGENT_DECORATED=1`` declares the tool with ``@git_pf.tool`` (replay answers it from the ledger).
Each request says how many lines CHANGELOG.md holds, read outside the tool.
Test helper only: runs as a real child process behind the real proxy."""
from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from pathlib import Path

STEPS = ["append: add", "replace: TODO => done", "commit: first", "append: sub", "mkdir: build", "append: mul"]
GIT_ENV = {"GIT_AUTHOR_NAME": "agent", "GIT_AUTHOR_EMAIL": "agent@example.com", "GIT_COMMITTER_NAME": "agent",
           "GIT_COMMITTER_EMAIL": "agent@example.com", "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
           "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def seed(world: Path) -> None:
    """The world a run starts from: notes with a TODO, and .git/index ignored (its stat data
    differs from one run to the next)."""
    world.mkdir(parents=True, exist_ok=True)
    (world / "notes.md").write_text("TODO: write the notes\n")
    (world / ".gitignore").write_text(".git/index\n")


def act(world: Path, reply: str) -> str:
    op, _, arg = reply.partition(": ")
    if op == "append":
        with open(world / "CHANGELOG.md", "a") as f:
            f.write(arg + "\n")
        return "appended"
    if op == "replace":
        old, new = arg.split(" => ")
        notes = world / "notes.md"
        text = notes.read_text()
        if old not in text:
            return f"error: {old!r} is not in notes.md"
        notes.write_text(text.replace(old, new, 1))
        return "replaced"
    if op == "commit":
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k.startswith("GIT_PF")}
        env.update(GIT_ENV)
        if not (world / ".git").exists():
            subprocess.run(["git", "init", "-q", "-b", "main", str(world)], env=env, check=True)
        subprocess.run(["git", "-C", str(world), "add", "-A"], env=env, check=True)
        proc = subprocess.run(["git", "-C", str(world), "commit", "-q", "-m", arg], env=env, capture_output=True)
        return f"commit exited {proc.returncode}"
    if op == "mkdir":
        try:
            os.mkdir(world / arg)
        except FileExistsError:
            return f"error: {arg} exists"
        return "made"
    return "noted"


def main() -> int:
    import openai

    world = Path(os.environ.get("TOOL_AGENT_ABS") or os.environ["GIT_PF_WORLD"])
    client = openai.OpenAI(api_key="sk-test-tool-agent", max_retries=0)
    messages = [{"role": "system", "content": "You are a test agent with tools."}]
    said = "start"
    tool = functools.partial(act, world)
    if os.environ.get("TOOL_AGENT_DECORATED"):
        import git_pf

        @git_pf.tool(name="act", side_effect="irreversible")
        def tool(reply):
            return act(world, reply)
    for i in range(1, int(os.environ.get("TOOL_AGENT_STEPS", "6")) + 1):
        if os.environ.get("TOOL_AGENT_EXTRA") == str(i):
            with open(world / "CHANGELOG.md", "a") as f:
                f.write("!")
        log = world / "CHANGELOG.md"
        lines = log.read_text().count("\n") if log.exists() else 0
        messages.append({"role": "user", "content": f"step {i}: {said}; CHANGELOG.md has {lines} lines"})
        try:
            reply = client.chat.completions.create(model="fake-model", messages=messages).choices[0].message.content
        except openai.APIStatusError:
            time.sleep(60)  # an agent backing off: stopped (killed) by the replay meanwhile
            return 1
        reply = reply or ""
        messages.append({"role": "assistant", "content": reply})
        said = tool(reply)
    print(said)
    return 0


if __name__ == "__main__":
    sys.exit(main())
