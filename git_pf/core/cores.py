"""How many CPU cores this process may use, which sizes the pools of threads that hash,
compress and copy.

``os.cpu_count()`` counts the machine's cores. A process pinned to some of
them (``taskset``, cpusets) or held to a CPU quota by its control group
(``docker --cpus``, a Kubernetes CPU limit) can use fewer, and a pool sized
by the machine then runs more busy threads than it has cores, each slowed by
the others. ``usable()`` is the smallest of the CPUs the process may run on
and its control group's quota (cgroup v2 ``cpu.max``, or v1
``cpu.cfs_quota_us`` / ``cpu.cfs_period_us``, in its group and every group
above it), rounded up, and at least 1. Reads /proc and /sys only; touches
nothing else.
"""
from __future__ import annotations

import functools
import math
import os
from pathlib import Path

_CGROUP_ROOT = Path("/sys/fs/cgroup")


@functools.lru_cache(maxsize=1)
def usable() -> int:
    """The cores this process may use (computed once per process)."""
    cores = _affinity()
    quota = cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def parse_cpu_max(text: str) -> float | None:
    """Cores allowed by a cgroup v2 ``cpu.max`` ("QUOTA PERIOD", QUOTA "max" for none); None for no limit."""
    fields = text.split()
    if len(fields) != 2 or fields[0] == "max":
        return None
    try:
        quota, period = int(fields[0]), int(fields[1])
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def parse_cfs(quota_us: str, period_us: str) -> float | None:
    """Cores allowed by cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (quota -1 for none)."""
    try:
        quota, period = int(quota_us), int(period_us)
    except ValueError:
        return None
    return quota / period if quota > 0 and period > 0 else None


def cgroup_quota(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = _CGROUP_ROOT) -> float | None:
    """The tightest CPU quota on this process's control group and those above it, in cores; None
    when there is none (or no cgroup file system to read)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    limits = []
    for line in lines:
        hierarchy, _, rest = line.partition(":")
        controllers, _, group = rest.partition(":")
        if hierarchy == "0" and controllers == "":  # cgroup v2 (unified)
            base = root / "unified" if (root / "unified").is_dir() else root
            limits += [parse_cpu_max(_read(d / "cpu.max")) for d in _groups(base, group)]
        elif "cpu" in controllers.split(","):  # cgroup v1 (cpu controller)
            base = next((root / n for n in (controllers, "cpu", "cpu,cpuacct") if (root / n).is_dir()), None)
            if base is not None:
                limits += [parse_cfs(_read(d / "cpu.cfs_quota_us"), _read(d / "cpu.cfs_period_us"))
                           for d in _groups(base, group)]
    limits = [q for q in limits if q is not None]
    return min(limits) if limits else None


def _groups(base: Path, group: str) -> list[Path]:
    """The directories of ``group`` and every group above it, under the hierarchy at ``base``."""
    parts = [p for p in group.strip("/").split("/") if p and p != ".."]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError:
        return ""
