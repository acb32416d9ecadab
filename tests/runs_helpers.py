"""Helpers of the record / replay / run tests: the agent's command line, a recorded run, reading the
reports. Test helper only: runs the real ``git-pf`` and the real agent (git_pf/testing/demo_agent.py)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

AGENT = ["-m", "git_pf.testing.demo_agent"]
# Reply scripts: step 2 reads task.md, so step 3's request carries what the world holds.
SCRIPT = ["I will keep notes.", {"tool": "read_file", "args": {"path": "task.md"}}, "Read it; writing notes.",
          {"tool": "write_file", "args": {"path": "out.txt", "content": "done"}}, "All done."]


def agent_cmd(api: str, sandbox: Path, *extra: str, effects: Path | None = None) -> list[str]:
    cmd = [sys.executable, *AGENT, "--api", api, "--sandbox", str(sandbox), *extra]
    return cmd + (["--effects-file", str(effects)] if effects else [])


def agent_line(stdout: str) -> dict:
    """The agent's own summary (its last ``agent: {...}`` line)."""
    line = [l for l in stdout.splitlines() if l.startswith("agent: ")][-1]
    return json.loads(line[len("agent: "):])


def report(stdout: str) -> dict:
    """The ``--json`` report git-pf prints after the agent's output."""
    return json.loads(stdout[stdout.rindex("\n{\n") + 1:] if not stdout.startswith("{\n") else stdout)


def record(run_pf, repo_dir: Path, fake, api: str, sandbox: Path, *extra: str, name: str = "run",
           effects: Path | None = None, env: dict | None = None, check: bool = True):
    sandbox.mkdir(parents=True, exist_ok=True)
    if not (sandbox / "task.md").exists():
        (sandbox / "task.md").write_text("Keep notes of every step in notes/.\n")
    return run_pf("record", "--name", name, "--fs-root", sandbox, "--upstream", fake.url, "--json", "--",
                  *agent_cmd(api, sandbox, *extra, effects=effects), cwd=repo_dir, env=env, check=check)


def git(repo_dir: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo_dir, capture_output=True, text=True, check=True).stdout


def step_ids(repo_dir: Path, branch: str) -> dict[int, str]:
    """Step number -> commit id of its step image on the first-parent line of ``branch`` (not the final image)."""
    out = {}
    fmt = "--format=%H %(trailers:key=Pf-Step,valueonly,separator=) %(trailers:key=Pf-Run-Exit,valueonly,separator=)"
    for line in git(repo_dir, "log", "--first-parent", fmt, f"refs/pf/heads/{branch}").splitlines():
        oid, step, *final = line.split()
        if not final:
            out.setdefault(int(step), oid)
    return out


def tape(repo_dir: Path, rev: str) -> list[dict]:
    """The tape entries of image ``rev`` (a commit id or ``refs/pf/...``), in tape order, loose or packed."""
    import pygit2

    from git_pf import Repo
    from git_pf.layers.trace import tape as tape_mod

    r = Repo.open(repo_dir)
    return tape_mod.read(r.git, str(r.git.revparse_single(rev).peel(pygit2.Tree).id))
