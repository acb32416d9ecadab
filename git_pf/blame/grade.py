"""Grading a run's outcome (docs/blame.md, "Method"): success, fail or undefined.

``--oracle CMD`` runs ``sh -c CMD`` in the run's final world (its cwd): exit 0
is success, any other exit a fail, a timeout or a command that cannot start
undefined. ``--success-re`` / ``--failure-re`` read the final response text
(the reply of the run's last exchange): the success pattern found is success;
the failure pattern found (or, without one, the success pattern not found) is
a fail; neither found with both given, or both found, is undefined. Runs the
oracle's process and reads text; writes nothing.
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import UsageError
from ..runs.llm import wire

SUCCESS, FAIL, UNDEFINED = "success", "fail", "undefined"
DETAIL_MAX = 200


def _line(text: str) -> str:
    """Text as one short printable line (what a verdict's trailer may hold)."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= DETAIL_MAX else flat[:DETAIL_MAX - 3] + "..."


@dataclass(frozen=True)
class Grader:
    oracle: str | None = None
    success_re: str | None = None
    failure_re: str | None = None
    timeout_s: float = 300.0

    def check(self) -> "Grader":
        """UsageError unless exactly one way of grading is given and its patterns compile."""
        if (self.oracle is None) == (self.success_re is None):
            raise UsageError("give one of --oracle CMD or --success-re RE")
        if self.failure_re is not None and self.success_re is None:
            raise UsageError("--failure-re needs --success-re")
        if self.oracle is not None and not self.oracle.strip():
            raise UsageError("--oracle: the command is empty")
        for flag, pattern in (("--success-re", self.success_re), ("--failure-re", self.failure_re)):
            if pattern is not None:
                try:
                    re.compile(pattern)
                except re.error as e:
                    raise UsageError(f"{flag}: '{pattern}' is not a regular expression: {e}") from None
        if not self.timeout_s > 0:
            raise UsageError("the oracle's timeout must be more than 0 seconds")
        return self

    def spec(self) -> dict:
        """How it grades, as the blame run's ``blame.json`` keeps it."""
        if self.oracle is not None:
            return {"oracle": self.oracle}
        return {"success_re": self.success_re, "failure_re": self.failure_re}

    def grade(self, world: Path | None, last: dict | None) -> tuple[str, str]:
        """(success | fail | undefined, what the grader saw) for a run whose final world is
        ``world`` and whose last exchange is ``last``."""
        if self.oracle is not None:
            return self._oracle(world)
        return self._regex(wire.reply_text(last) if last else "")

    def _regex(self, text: str) -> tuple[str, str]:
        ok = re.search(self.success_re, text) is not None
        bad = re.search(self.failure_re, text) is not None if self.failure_re is not None else not ok
        said = f"final response {_line(text)!r}"
        if ok and not bad:
            return SUCCESS, f"--success-re found in the {said}"
        if bad and not ok:
            return FAIL, (f"--failure-re found in the {said}" if self.failure_re is not None
                          else f"--success-re not found in the {said}")
        return UNDEFINED, ("both patterns found in the " if ok else "neither pattern found in the ") + said

    def _oracle(self, world: Path | None) -> tuple[str, str]:
        if world is None or not Path(world).is_dir():
            return UNDEFINED, "no final world to run the oracle in"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_PF_")}
        try:
            proc = subprocess.Popen(["sh", "-c", self.oracle], cwd=world, env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        except OSError as e:
            return UNDEFINED, f"the oracle could not start: {e.strerror or e}"
        try:
            out, _ = proc.communicate(timeout=self.timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc)
            return UNDEFINED, f"the oracle timed out after {self.timeout_s:g} s"
        except BaseException:
            _kill_group(proc)
            raise
        tail = _line(out.decode("utf-8", "replace").strip().splitlines()[-1]) if out.strip() else ""
        said = f"the oracle exited {proc.returncode}" + (f": {tail}" if tail else "")
        return (SUCCESS if proc.returncode == 0 else FAIL), said


def _kill_group(proc: subprocess.Popen) -> None:
    """The oracle and everything it started."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    proc.communicate()
