"""The debugger half of ``make demo``: record a small agent against the offline fake LLM server, replay it
bit-exact, fork it at step 3 with another model reply, run on live from there, and diff the two runs;
then blame a failing run of a scripted agent (whose model went wrong at one step) and write the reports.

Runs after the story of ``git_pf.testing.demo``, with its ``Demo`` (its ``run`` and ``say``), and like it uses
only the ``git pf`` command, the fake server (``python -m git_pf.testing.fakellm``) and the demo agent
(``python -m git_pf.testing.demo_agent``, on the real openai SDK), and for blame the scripted agent and
model of ``git pf blame --validate`` (``git_pf.testing.scripted``, its model served in this process): no
network, no API key. It touches nothing outside the demo's directory and stops the servers it started.
"""
from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

# The fake model's replies, in order: five for the recorded run, two for the run on after the fork.
REPLIES = ["I will keep notes of every step.", {"tool": "read_file", "args": {"path": "task.md"}},
           "Read task.md; writing notes.", {"tool": "write_file", "args": {"path": "out.txt", "content": "done"}},
           "All done.",
           {"tool": "write_file", "args": {"path": "plan.txt", "content": "1. read task.md\n2. keep notes\n"}},
           "Plan written; all done."]
FORK_REPLY = "Read task.md. Before writing notes I will write a plan.\n"
# What would point the agent elsewhere than the fake server, or give it a real key.
NOT_PASSED = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
              "AGENT_EFFECTS_FILE", "AGENT_SECRET")


class Debugger:
    """Record, replay, fork a step, run on; one method per step of the story."""

    def __init__(self, demo):
        self.demo, self.base = demo, demo.base
        self.python = Path(sys.executable).name  # first on the demo's PATH
        self.outbox = self.base / "outbox.log"  # where the agent's irreversible notify tool writes
        self.agent = [self.python, "-m", "git_pf.testing.demo_agent", "--api", "openai.chat", "--stream",
                      "--effects-file", self.outbox]
        self.server: subprocess.Popen | None = None
        self.url = ""

    def start_fake_llm(self) -> None:
        self.demo.say("7. the debugger half: an offline fake LLM server stands in for the model "
                      "(no network, no API key)")
        for name in NOT_PASSED:
            self.demo.env.pop(name, None)
        replies = [r if isinstance(r, str) else json.dumps(r) for r in REPLIES]
        cmd = [self.python, "-m", "git_pf.testing.fakellm", "--reply", *replies]
        print(f"\n[demo]$ {' '.join(shlex.quote(str(a)) for a in cmd)} &", flush=True)
        self.server = subprocess.Popen(cmd, cwd=self.base, env=self.demo.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
        self.url = self.server.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.stop()
            raise SystemExit(f"demo step failed: the fake LLM server did not start: {self.url!r}")
        print(f"  {self.url}", flush=True)

    def record(self) -> None:
        self.demo.say("8. record an agent (real openai SDK, streamed) through git pf's proxy: every LLM "
                      "exchange is a step image on branch `run`; its `notify` tool is irreversible")
        sandbox = self.base / "agent"
        sandbox.mkdir()
        (sandbox / "task.md").write_text("Keep notes of every step in notes/.\n")
        self.demo.run("git", "pf", "record", "--name", "run", "--fs-root", sandbox, "--upstream", self.url, "--",
                      *self.agent)
        self.demo.run("git", "pf", "log", "run", "--oneline")
        print(f"  outbox.log, written by notify: {self._outbox()}", flush=True)

    def replay(self) -> None:
        self.demo.say("9. replay it from the tape in a fresh directory: the recorded replies and draws "
                      "(clock, uuid, random) served back, notify answered from the effects ledger")
        out = _report(self.demo.run("git", "pf", "replay", "run", "--fs-root", self.base / "replay", "--json", "--",
                                    *self.agent))
        if not out.get("bit_exact"):
            raise SystemExit(f"demo step failed: the replay was not bit-exact: {out}")
        ex, dr, ef = out["exchanges"], out["draws"], out["effects"]
        print(f"  replay: bit-exact ({ex['served']}/{ex['of']} exchanges, {dr['consumed']}/{dr['of']} draws, "
              f"{ef['replayed']}/{ef['of']} effects); outbox.log: {self._outbox()}", flush=True)

    def fork(self) -> None:
        self.demo.say("10. fork the run at step 3 with another model reply; steps 0-2 stay run's own commits")
        reply = self.base / "better-reply.txt"
        reply.write_text(FORK_REPLY)
        self.demo.run("git", "pf", "fork", "run", "--at-step", "3", "--response", reply, "--name", "run-fix")
        self.demo.run("git", "pf", "log", "run-fix", "--oneline")
        ours, theirs = self._steps("run"), self._steps("run-fix")
        shared = [n for n in (0, 1, 2) if ours.get(n) == theirs.get(n)]
        if shared != [0, 1, 2] or ours.get(3) == theirs.get(3):
            raise SystemExit(f"demo step failed: the fork does not share steps 0-2 with run: {ours} {theirs}")
        print("  steps 0-2 of run-fix are run's commits: " + " ".join(theirs[n][:12] for n in shared), flush=True)
        self.demo.run("git", "pf", "show", "run-fix", "--step", "3")

    def run_on(self) -> None:
        self.demo.say("11. run on from the fork: steps 1-3 from the tape (step 3 with the new reply), "
                      "steps 4-5 live against the fake server, in step 3's files")
        world = self.base / "run-fix-world"
        self.demo.run("git", "pf", "run", "run-fix", "--upstream", self.url, "--fs-root", world, "--", *self.agent)
        note = (world / "notes" / "step-03.txt").read_text().strip()
        print(f"  notes/step-03.txt: {note!r}; outbox.log: {self._outbox()}", flush=True)

    def diff(self) -> None:
        self.demo.say("12. what the new reply changed: the two runs' last steps, layer by layer")
        self.demo.run("git", "pf", "diff", "run", "run-fix", "--at-step", "5", "-p")

    def blame(self) -> None:
        from . import scripted
        from .fakellm import FakeLLM

        plan = scripted.fault_plan(7, "wrong_instruction")
        self.demo.say(f"13. blame a failed run: a scripted agent of {plan.steps} steps whose model gave a wrong "
                      f"instruction once (at a step the demo keeps to itself); its checker fails the final files")
        world = self.base / "scripted"
        world.mkdir()
        (world / scripted.TASK).write_bytes(scripted.task_json(plan.seed))
        agent = [self.python, "-m", "git_pf.testing.scripted", "agent", "--task-seed", str(plan.seed)]
        oracle = f"{self.python} -m git_pf.testing.scripted check --task-seed {plan.seed}"
        with FakeLLM(scripted.ScriptedModel(plan)) as fake:
            self.demo.run("git", "pf", "record", "--name", "failed", "--fs-root", world, "--upstream", fake.url,
                          "--", *agent)
            blame = ["git", "pf", "blame", "failed", "--oracle", oracle, "-k", "3", "--perturb", "resample",
                     "--jobs", "2", "--no-mount", "--upstream", fake.url]
            self.demo.run(*blame, "--", *agent)
            again = subprocess.run([*blame, "--json", "--", *agent], cwd=self.demo.work, env=self.demo.env,
                                   capture_output=True, text=True)  # the same command resumes: nothing to redo
        out = json.loads(again.stdout) if again.returncode == 0 else {}
        if out.get("decisive") != plan.step or out.get("resumed") != len(out.get("trials", [None])):
            raise SystemExit(f"demo step failed: blame named step {out.get('decisive')} (the fault was at step "
                             f"{plan.step}), resumed {out.get('resumed')}: {again.stderr.strip()}")
        print(f"  blame: step {out['decisive']} is decisive, and the fault was injected at step {plan.step}; "
              f"the same command again resumed all {out['resumed']} trials (refs/pf/blame/failed/)", flush=True)

    def report(self) -> None:
        self.demo.say("14. write each run as one self-contained HTML page a person reads in a browser: steps, "
                      "exchanges, world diffs, effects, the fork graph, and the blame chart")
        for branch in ("run", "failed"):
            page = self.base / f"report-{branch}.html"
            self.demo.run("git", "pf", "report", branch, "-o", page)
            print(f"  {page.name}: {page.stat().st_size // 1024} KiB, no network request", flush=True)

    def stop(self) -> None:
        if self.server is not None:
            self.server.terminate()
            self.server.wait(timeout=10)
            self.server.stdout.close()
            self.server.stderr.close()
            self.server = None

    def _outbox(self) -> str:
        lines = self.outbox.read_text().splitlines() if self.outbox.exists() else []
        return f"{len(lines)} line{'s' if len(lines) != 1 else ''}"

    def _steps(self, branch: str) -> dict[int, str]:
        """Step number -> image id on ``branch``, from ``git pf log --json`` (the step image, not the final one)."""
        proc = subprocess.run(["git", "pf", "log", branch, "--json"], cwd=self.demo.work, env=self.demo.env,
                              capture_output=True, text=True, check=True)
        steps: dict[int, str] = {}
        for entry in reversed(json.loads(proc.stdout)):  # oldest first
            if entry.get("step") is not None:
                steps.setdefault(entry["step"], entry["id"])
        return steps


def _report(stdout: str) -> dict:
    """The ``--json`` report git pf prints after the agent's own output."""
    start = stdout.rfind("\n{\n")
    return json.loads(stdout[start + 1:] if start >= 0 else stdout)


def run_debugger(debugger: Debugger) -> None:
    """The whole debugger half, in order."""
    try:
        debugger.start_fake_llm()
        debugger.record()
        debugger.replay()
        debugger.fork()
        debugger.run_on()
        debugger.diff()
    finally:
        debugger.stop()
    debugger.blame()
    debugger.report()
    debugger.demo.say("done: record -> replay (bit-exact) -> fork at step 3 -> run on -> diff -> blame -> report")
