"""The cores a process may use size the thread pools: CPU affinity and cgroup CPU quotas count,
not just the machine's cores."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from git_pf.core import cores

_REPORT = "from git_pf.core import cores; from git_pf.layers.cache import pages; print(cores.usable(), pages.WORKERS)"


def test_usable_cores_never_exceed_the_cpus_this_process_may_run_on():
    assert 1 <= cores.usable() <= len(os.sched_getaffinity(0))


@pytest.mark.skipif(shutil.which("taskset") is None, reason="taskset (util-linux) is not installed")
def test_a_process_pinned_to_one_cpu_counts_one_core():
    cpu = min(os.sched_getaffinity(0))
    out = subprocess.run(["taskset", "-c", str(cpu), sys.executable, "-c", _REPORT],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[0] == "1"
    assert out[1] == "2"  # the KV page pool keeps two threads, so one can compute while one reads


@pytest.mark.parametrize("text, want", [
    ("max 100000", None), ("150000 100000", 1.5), ("50000 100000", 0.5), ("", None), ("-1 100000", None),
])
def test_cgroup_v2_cpu_max_is_read_as_cores(text, want):
    assert cores.parse_cpu_max(text) == want


def _tree(tmp_path, proc: str, files: dict[str, str]):
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    (tmp_path / "proc-cgroup").write_text(proc)
    return tmp_path / "proc-cgroup", root


def test_the_tightest_v2_quota_on_the_group_or_above_it_counts(tmp_path):
    proc, root = _tree(tmp_path, "0::/jobs/agent-7\n", {
        "jobs/agent-7/cpu.max": "max 100000",  # no limit of its own
        "jobs/cpu.max": "250000 100000",  # 2.5 cores for every job
        "cpu.max": "800000 100000",
    })
    assert cores.cgroup_quota(proc, root) == 2.5


def test_a_v1_cfs_quota_counts_and_minus_one_means_none(tmp_path):
    proc, root = _tree(tmp_path, "4:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n", {
        "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000",
        "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000",
        "cpu,cpuacct/docker/cpu.cfs_quota_us": "-1",
        "cpu,cpuacct/docker/cpu.cfs_period_us": "100000",
    })
    assert cores.cgroup_quota(proc, root) == 3.0


def test_no_quota_anywhere_is_none(tmp_path):
    proc, root = _tree(tmp_path, "0::/\n", {"cpu.max": "max 100000"})
    assert cores.cgroup_quota(proc, root) is None
    assert cores.cgroup_quota(tmp_path / "absent", root) is None
