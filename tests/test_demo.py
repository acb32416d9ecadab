"""`make demo` keeps working: the end-to-end story runs clean from start to finish, then its debugger half
(record an agent against the offline fake LLM server, replay it, fork a step, run on, blame a failed run,
write the reports)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"),
                    reason="the demo mounts images: needs /dev/fuse and fusermount3")
def test_demo_runs_end_to_end():
    proc = subprocess.run([sys.executable, "-m", "git_pf.testing.demo"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "main-fork-2: tests pass" in out
    assert "Merged: image" in out and "trace    clean" in out
    assert "refs/pf/heads/main -> refs/pf/heads/main" in out  # plain git push carried the images
    assert "return a + b" in out and "tests in the mounted image: pass" in out  # merged image, from a clone
    assert "done: snapshot -> fork -> mount -> merge -> git push -> clone -> mount" in out
    # the debugger half
    assert "git pf: recorded 5 steps on 'run'" in out
    assert '"bit_exact": true' in out and "replay: bit-exact (5/5 exchanges" in out
    shared = re.search(r"steps 0-2 of run-fix are run's commits: (\w+) (\w+) (\w+)", out).groups()
    for n, oid in enumerate(shared):  # listed on both branches by git pf log, as the same step
        assert out.count(f"  {oid} [step {n}] ") == 2, (oid, n)
    assert "Pf-Forked-From: " in out and "git pf: ran on: recorded 2 steps on 'run-fix'" in out
    assert "notes/step-03.txt: 'Read task.md. Before writing notes I will write a plan.'" in out
    assert out.count("outbox.log: 1 line") == 2  # the irreversible notify ran once: not on replay, not on run
    assert "+1. read task.md" in out  # the diff of the two runs' last steps: the fork's live steps wrote plan.txt
    blamed = re.search(r"blame: step (\d+) is decisive, and the fault was injected at step (\d+); "
                       r"the same command again resumed all (\d+) trials", out)
    assert blamed and blamed.group(1) == blamed.group(2) and int(blamed.group(3)) >= 15
    assert re.search(r"report-run\.html: \d+ KiB", out) and re.search(r"report-failed\.html: \d+ KiB", out)
    assert out.rstrip().endswith("done: record -> replay (bit-exact) -> fork at step 3 -> run on -> diff -> blame -> report")
