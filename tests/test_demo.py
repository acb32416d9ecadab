"""`make demo` keeps working: the end-to-end story runs clean from start to finish."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest


@pytest.mark.skipif(not os.path.exists("/dev/fuse") or not shutil.which("fusermount3"),
                    reason="the demo mounts images: needs /dev/fuse and fusermount3")
def test_demo_runs_end_to_end():
    proc = subprocess.run([sys.executable, "-m", "git_pf.demo"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "main-fork-2: tests pass" in out
    assert "Merged: image" in out and "trace    clean" in out
    assert "refs/pf/heads/main -> refs/pf/heads/main" in out  # plain git push carried the images
    assert "return a + b" in out and "tests in the mounted image: pass" in out  # merged image, from a clone
    assert out.rstrip().endswith("done: snapshot -> fork -> mount -> merge -> git push -> clone -> mount")
