"""What ``git pf serve``'s buttons do: fork a run at a step with a new reply, and run a fork on.

``Actions`` checks a request's JSON body, forks with ``git_pf.runs.forking.fork_at_step`` and runs
a fork on with ``git pf run`` (``git_pf.runs.runon.run``) in a child process of its own session, so
a run can be followed while it goes and stopped cleanly (SIGTERM) when the server stops. It writes
to the repository only through those two; it knows nothing of HTTP (git_pf.report.serve does).
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from ..core.errors import UsageError

STOP_WAIT_S = 10.0  # how long a stopping server waits for a run to finish its steps before killing it
MAX_REPLY = 1 << 20  # bytes of a new reply
OUTPUT_CHARS = 4000  # the end of a run's output (the agent's stdout) the page is shown


class Conflict(UsageError):
    """The request is sound but clashes with what is going on (a run of that branch is running)."""


def _field(body: dict, key: str, kind: type, what: str, *, optional: bool = False):
    value = body.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, kind) or isinstance(value, bool):
        raise UsageError(f"'{key}' must be {what}")
    return value


def _repo(path: Path):
    from ..repo import Repo

    return Repo.open(path)


def _branch(repo, body: dict) -> str:
    from ..image import refs

    name = refs.check_name(_field(body, "branch", str, "a branch name"))
    if refs.branch_tip(repo.git, name) is None:
        raise UsageError(f"no branch '{name}'")
    return name


class Job:
    """One ``git pf run`` started from the page: its process and, once it ended, its report."""

    def __init__(self, number: int, branch: str, proc: subprocess.Popen, out: Path, err: Path):
        self.number, self.branch, self.proc, self.out, self.err = number, branch, proc, out, err
        self.state, self.result, self.error, self.output = "running", None, None, ""
        self.thread = threading.Thread(target=self.finish, name=f"pf-serve-run-{number}", daemon=True)

    def finish(self) -> None:
        """Wait for the run; then read its ``--json`` report (the last JSON object on its stdout)
        and its one-line error, if any."""
        code = self.proc.wait()
        try:
            text = self.out.read_text(encoding="utf-8", errors="replace")
            lines = self.err.read_text(encoding="utf-8", errors="replace").strip().splitlines()
        except OSError as e:  # the logs are gone (the server is stopping): the run's end is all there is
            text, lines = "", [f"git pf run exited {code}; its output could not be read ({e.strerror})"]
        at = 0 if text.startswith("{\n") else text.rfind("\n{\n") + 1
        try:
            self.result = json.loads(text[at:]) if at or text.startswith("{\n") else None
        except ValueError:
            self.result = None
        self.output = (text[:at] if self.result is not None else text)[-OUTPUT_CHARS:]
        ours = [line for line in lines if line.startswith("git pf: ")]
        if ours or self.result is None:
            self.error = (ours or lines or [f"git pf run exited {code}"])[-1]
        self.state = "failed" if self.error else "done"

    def to_json(self) -> dict:
        out = {"id": self.number, "branch": self.branch, "state": self.state, "error": self.error,
               "output": self.output}
        if self.result is not None:
            out.update(exit=self.result.get("exit"), steps=self.result.get("steps"), tip=self.result.get("tip"))
        return out


class Actions:
    """Fork and run on, for one repository; ``agent`` is the agent command a run starts (may be empty)."""

    def __init__(self, repo_path: Path, agent: list[str], upstreams: list[str] = ()):
        self.repo_path, self.agent, self.upstreams = Path(repo_path), list(agent), list(upstreams)
        self.lock = threading.Lock()
        self.jobs: dict[int, Job] = {}
        self.logs = Path(tempfile.mkdtemp(prefix="pf-serve-"))
        self.closed = False

    def fork(self, body: dict) -> dict:
        """``{"branch", "step", "reply", "name"?}``: a new branch whose step holds ``reply``."""
        from ..runs.llm import wire
        from ..runs import forking

        step = _field(body, "step", int, "a step number")
        reply = _field(body, "reply", str, "the new reply text")
        name = _field(body, "name", str, "a branch name", optional=True)
        if len(reply.encode("utf-8", errors="replace")) > MAX_REPLY:
            raise UsageError(f"the reply is over {MAX_REPLY} bytes")
        with self.lock:
            repo = _repo(self.repo_path)
            branch = _branch(repo, body)
            name = name or forking.default_name(repo.git, branch, step)
            image = forking.fork_at_step(repo, branch, step, name=name,
                                         entry_change=lambda entry: wire.with_reply(entry, reply))
        return {"name": name, "id": image.id, "step": step}

    def run(self, body: dict) -> dict:
        """``{"branch"}``: start ``git pf run BRANCH -- AGENT`` in the background; the job's state."""
        if not self.agent:
            raise UsageError("no agent command: start 'git pf serve -- AGENT_CMD' to run a fork on")
        with self.lock:
            if self.closed:
                raise Conflict("the server is stopping")
            branch = _branch(_repo(self.repo_path), body)
            if any(j.branch == branch and j.state == "running" for j in self.jobs.values()):
                raise Conflict(f"a run of '{branch}' is still running")
            number = len(self.jobs) + 1
            out, err = self.logs / f"{number}.out", self.logs / f"{number}.err"
            ups = [f"--upstream={u}" for u in self.upstreams]
            with open(out, "wb") as o, open(err, "wb") as e:
                proc = subprocess.Popen([sys.executable, "-m", "git_pf", "run", branch, "--json", *ups, "--",
                                         *self.agent], stdin=subprocess.DEVNULL, stdout=o, stderr=e,
                                        env=dict(os.environ, GIT_PF_REPO=str(self.repo_path)),
                                        start_new_session=True)  # Ctrl-C reaches the server, which stops it
            job = self.jobs[number] = Job(number, branch, proc, out, err)
        job.thread.start()
        return job.to_json()

    def job(self, number: int) -> dict | None:
        job = self.jobs.get(number)
        return job.to_json() if job is not None else None

    def close(self) -> None:
        """Stop every run still going (SIGTERM: it ends its steps as Ctrl-C would), let each job read
        its logs, then drop them."""
        with self.lock:
            self.closed = True
            jobs = list(self.jobs.values())
            running = [j for j in jobs if j.proc.poll() is None]
        for job in running:
            job.proc.send_signal(signal.SIGTERM)
        for job in running:
            try:
                job.proc.wait(STOP_WAIT_S)
            except subprocess.TimeoutExpired:
                job.proc.kill()
                job.proc.wait()
        for job in jobs:
            job.thread.join(STOP_WAIT_S)
        shutil.rmtree(self.logs, ignore_errors=True)

