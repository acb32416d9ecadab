"""Wall time of Claude Code's ``PostToolUse`` hook (``git pf hook claude-code``) on a 5,000-file project.

    python -m benchmarks.bench_claude_hook [--runs 15] [--files 5000] [--changed 3]

The project is a git work tree of ``--files`` files (~1 KB each, 1,000
directories); before each timed call ``--changed`` files are rewritten and the
session's transcript grows by a user line, an assistant tool call and its
result, as a tool call would leave them. Each call runs as Claude Code runs a
hook: ``sh -c COMMAND`` with the event JSON on stdin, COMMAND being the one
``git pf install --claude-code`` writes (the interpreter with ``-S`` and the
hook client's file) and, for comparison, ``git pf hook claude-code`` through
git's dispatcher. Figures are medians of ``--runs`` calls with the
median CPU time (user + sys) of the hook's processes beside them (the
server's own is not in it), for the warm path (the repository's hook server running) and for the same events handled
in the hook's own process (``pf.claudeCode.server=false``), against
``python -c pass``. Goal: at most 150 ms per call.

With the real Claude Code CLI (``make claude-code``; skipped when it is not
installed), the same scripted session (Write, a failing Bash, Edit, a final
answer, from the tests' scripted Anthropic server) is run with ``claude -p`` on
the same project, without and with git-pf's hooks installed (warm: the hook
server running), ``--cli-runs`` times each, interleaved; the difference of the
medians per tool call is what the hooks add (every event of the session
counted in it). A third variant, interleaved too, times each hook command
inside its own ``sh -c``: the hook processes' own time per tool call and per
event, which a loaded machine disturbs far less than the CLI's wall time.
Goal: at most 100 ms per tool call.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from .bench_cli import Timing, _ms
from .bench_snapshot import make_tree
from .common import git_env, report, sh, verdict, workdir

GOAL = 0.150
CLI_GOAL = 0.100


def _transcript_lines(i: int) -> list[dict]:
    use = {"type": "tool_use", "id": f"toolu_{i}", "name": "Bash", "input": {"command": f"make step{i}"}}
    return [
        {"type": "user", "uuid": f"u{i}", "message": {"role": "user", "content": f"please run step {i}"}},
        {"type": "assistant", "uuid": f"a{i}", "message": {"id": f"msg_{i}", "role": "assistant", "content": [use]}},
        {"type": "user", "uuid": f"r{i}", "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": f"toolu_{i}", "content": "ok\n" * 20}]}},
    ]


class Session:
    def __init__(self, project: Path, transcript: Path, sid: str, env: dict, paths: list[Path], changed: int,
                 command: str = "git pf hook claude-code"):
        self.project, self.transcript, self.sid, self.env = project, transcript, sid, env
        self.paths, self.changed, self.step, self.command = paths, changed, 0, command

    def event(self, name: str, **more) -> bytes:
        return json.dumps({"session_id": self.sid, "transcript_path": str(self.transcript), "cwd": str(self.project),
                           "hook_event_name": name, **more}).encode()

    def call(self, payload: bytes) -> tuple[float, float]:
        r0 = os.times()
        t0 = time.perf_counter()
        subprocess.run(["sh", "-c", self.command], input=payload, cwd=self.project, env=self.env,
                       check=True, stdout=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        r1 = os.times()
        return wall, r1.children_user - r0.children_user + r1.children_system - r0.children_system

    def tool_call(self) -> tuple[float, float]:
        self.step += 1
        i = self.step
        for p in self.paths[i * self.changed:(i + 1) * self.changed]:
            p.write_bytes(p.read_bytes()[::-1] + b"!")
        with open(self.transcript, "a") as f:
            f.writelines(json.dumps(line) + "\n" for line in _transcript_lines(i))
        return self.call(self.event("PostToolUse", tool_name="Bash", tool_use_id=f"toolu_{i}",
                                    tool_input={"command": f"make step{i}"}, tool_response={"stdout": "ok\n" * 20}))


def _median(samples: list[tuple[float, float]]) -> Timing:
    walls = sorted(s[0] for s in samples)
    cpus = sorted(s[1] for s in samples)
    t = Timing(walls[len(walls) // 2])
    t.cpu = cpus[len(cpus) // 2]
    return t


def bench(base: Path, runs: int, files: int, changed: int) -> list:
    project = base / "project"
    paths = make_tree(project, files, files * 1000)
    sh("git", "init", "-q", project)
    bin_dir = str(Path(sys.executable).parent)  # where the git-pf console script is installed
    env = dict(git_env(), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}", CLAUDE_PROJECT_DIR=str(project))
    sh("git", "pf", "init", cwd=project, env=env)
    rows = []
    t_py = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        t_py.append((time.perf_counter() - t0, 0.0))
    rows.append(("python -c pass", f"{_median(t_py) * 1000:.0f} ms", ""))
    from git_pf.integrations.claude_code.settings import hook_command

    commands = {"the installed command (python -S)": hook_command(), "git pf hook claude-code": "git pf hook claude-code"}
    for mode, server in (("warm", "true"), ("in the hook's process", "false")):
        sh("git", "config", "pf.claudeCode.server", server, cwd=project)
        s = Session(project, base / f"transcript-{server}.jsonl", f"bench-{server}", env, paths, changed)
        s.call(s.event("SessionStart", source="startup"))
        for _ in range(2):  # untimed: the server starts, the stat cache and transcript are read once
            s.tool_call()
        samples: dict[str, list] = {label: [] for label in commands}
        for _ in range(runs):  # the two commands interleaved, on the same server: a busy moment hits both
            for label, command in (commands.items() if server == "true" else list(commands.items())[:1]):
                s.command = command
                samples[label].append(s.tool_call())
        for label, got in samples.items():
            if got:
                t = _median(got)
                rows.append((f"PostToolUse, {mode}, {label}", _ms(t),
                             f"goal <= {GOAL * 1000:.0f} ms  {verdict(t <= GOAL)}"))
        # a running server answers whatever the config says: stop it before the next mode
        subprocess.run(["git", "pf", "hook", "claude-code", "--stop-server"], cwd=project, env=env,
                       stdout=subprocess.DEVNULL)
    return rows


def _timed_settings(project: Path, log: Path) -> bytes:
    """The installed settings with each hook command timed inside its own ``sh -c`` (event name and
    milliseconds appended to ``log``): what the hook processes alone cost, whatever the machine's load
    does to the CLI's own time."""
    settings = json.loads((project / ".claude" / "settings.json").read_bytes())
    for event, groups in settings["hooks"].items():
        for group in groups:
            for hook in group["hooks"]:
                hook["command"] = (f"s=$(date +%s%N); {hook['command']}; "
                                   f"echo {event} $(( ($(date +%s%N) - s) / 1000 )) >> '{log}'")
    return json.dumps(settings).encode()


def bench_cli(base: Path, runs: int, files: int) -> list:
    """The real CLI's wall time for one scripted session, without and with the hooks; and the hook
    processes' own time in a third, timed, variant of the session."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the scripted Anthropic server
    import claude_cli_helpers as cli

    if cli.missing():
        return [("real CLI", "skipped", cli.missing())]
    project = base / "cli-project"
    make_tree(project, files, files * 1000)
    sh("git", "init", "-q", project)
    bin_dir = str(Path(sys.executable).parent)
    env = dict(git_env(), PATH=f"{bin_dir}:{os.environ.get('PATH', '')}")
    sh("git", "pf", "init", cwd=project, env=env)
    settings = project / ".claude" / "settings.json"
    log = base / "hook-times.log"
    sh("git", "pf", "install", "--claude-code", cwd=project, env=env)
    timed = _timed_settings(project, log)
    sh("git", "pf", "uninstall", "--claude-code", cwd=project, env=env)
    samples: dict[str, list[float]] = {"none": [], "hooks": [], "timed": []}
    per_session: list[dict[str, float]] = []
    with cli.ScriptedAnthropic(cli.session(project)) as server:
        cenv = cli.claude_env(env, server.url, base / "claude-config")
        for n in range(runs + 1):  # the first round is untimed: caches, and the hook server's start
            for mode in samples:  # interleaved, so a busy moment of the machine hits all alike
                if mode == "hooks":
                    sh("git", "pf", "install", "--claude-code", cwd=project, env=env)
                elif mode == "timed":
                    settings.parent.mkdir(exist_ok=True)
                    settings.write_bytes(timed)
                    log.unlink(missing_ok=True)
                for name in ("hello.py", "made.txt"):
                    (project / name).unlink(missing_ok=True)
                t0 = time.perf_counter()
                cli.run_claude(project, cenv, "make hello.py")
                took = time.perf_counter() - t0
                if mode == "hooks":
                    sh("git", "pf", "uninstall", "--claude-code", cwd=project, env=env)
                elif mode == "timed":
                    settings.unlink()
                    settings.parent.rmdir()  # as uninstall leaves the project
                    if n:
                        times: dict[str, float] = {}
                        for line in log.read_text().splitlines():
                            event, us = line.split()
                            times[event] = times.get(event, 0.0) + int(us) / 1e6
                        per_session.append(times)
                if n:
                    samples[mode].append(took)
        subprocess.run(["git", "pf", "hook", "claude-code", "--stop-server"], cwd=project, env=env,
                       stdout=subprocess.DEVNULL)
    medians = {k: sorted(v)[len(v) // 2] for k, v in samples.items()}
    rows = [(f"claude -p, 3 tool calls, {label}", f"{medians[k] * 1000:.0f} ms", "")
            for k, label in (("none", "without hooks"), ("hooks", "with hooks (warm)"))]
    per_call = (medians["hooks"] - medians["none"]) / 3
    rows.append(("added per tool call", f"{per_call * 1000:.0f} ms",
                 f"goal <= {CLI_GOAL * 1000:.0f} ms  {verdict(per_call <= CLI_GOAL)}"))
    rows.append(("  ratio with / without hooks", f"{medians['hooks'] / medians['none']:.2f}x", ""))
    if per_session:
        totals = sorted(sum(t.values()) for t in per_session)
        own = totals[len(totals) // 2] / 3
        rows.append(("the hook processes alone, per tool call (timed in their sh)", f"{own * 1000:.0f} ms",
                     f"goal <= {CLI_GOAL * 1000:.0f} ms  {verdict(own <= CLI_GOAL)}"))
        for event in sorted({e for t in per_session for e in t}):
            got = sorted(t.get(event, 0.0) for t in per_session)
            rows.append((f"  {event}, per session", f"{got[len(got) // 2] * 1000:.0f} ms", ""))
    return rows


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--cli-runs", type=int, default=5)
    ap.add_argument("--files", type=int, default=5000)
    ap.add_argument("--changed", type=int, default=3)
    args = ap.parse_args(argv)
    with workdir("claude-hook") as base:
        report(f"Claude Code PostToolUse hook, {args.files} files, {args.changed} changed per call",
               bench(base, args.runs, args.files, args.changed))
        report(f"The real Claude Code CLI, one scripted session, {args.files} files", bench_cli(base, args.cli_runs,
                                                                                              args.files))


if __name__ == "__main__":
    main()
