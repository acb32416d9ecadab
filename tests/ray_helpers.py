"""A real Ray cluster on loopback for the executor tests: ``ray start --head`` in a session of its
own, with a working directory and HOME of its own (so workers share nothing with the driver but
the remote's URL), stopped by its process group afterwards."""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from transport_helpers import BIN, ENV, free_port


@contextmanager
def ray_cluster(tmp: Path, cpus: int = 2, env: dict | None = None):
    """Start a one-node cluster; yields ``(address, node_dir)``: workers' cwd is ``node_dir/cwd``,
    their HOME ``node_dir/home`` (the node's cache repositories land under it)."""
    node = tmp / "node"
    (node / "cwd").mkdir(parents=True)
    (node / "home").mkdir()
    temp = Path(tempfile.mkdtemp(prefix="pfray"))  # Ray's socket paths must stay short
    port = free_port()
    full = dict(ENV, HOME=str(node / "home"), RAY_USAGE_STATS_ENABLED="0", **(env or {}))
    full.pop("RAY_ADDRESS", None)
    log = open(tmp / "ray.log", "wb")
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--head", "--block", f"--num-cpus={cpus}",
                             "--disable-usage-stats", "--include-dashboard=false", f"--port={port}",
                             "--node-ip-address=127.0.0.1", f"--temp-dir={temp}",
                             "--object-store-memory=100000000"],
                            cwd=node / "cwd", env=full, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        end = time.time() + 120
        while b"Ray runtime started" not in (tmp / "ray.log").read_bytes():
            if proc.poll() is not None or time.time() > end:
                raise AssertionError(f"ray start failed:\n{(tmp / 'ray.log').read_text()[-3000:]}")
            time.sleep(0.2)
        yield f"127.0.0.1:{port}", node
    finally:
        for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(grace)
                time.sleep(0.5)  # the rest of the group (raylet, workers) goes with the head
            except subprocess.TimeoutExpired:
                continue
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def ancestors(pid: int) -> list[tuple[int, str]]:
    """``(pid, command line)`` of ``pid`` and each of its parents."""
    out = []
    while pid > 1:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        out.append((pid, cmdline))
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def processes_with(words: str) -> list[int]:
    """Pids whose command line contains ``words``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if words in cmdline:
                found.append(int(entry))
    return found


def kill_worker_running(words: str, killed: list, over, also_the_process: bool = False) -> None:
    """kill -9 the Ray worker (``ray::`` process) above the first process whose command line holds
    ``words`` (and that process too, with ``also_the_process``: one in a session of its own outlives
    its worker); its pid goes into ``killed``. Gives up when ``over`` is set or after 120 s."""
    end = time.time() + 120
    while not killed and not over.is_set() and time.time() < end:
        for pid in processes_with(words):
            worker = [p for p, cmdline in ancestors(pid) if cmdline.startswith("ray::")]
            if worker:
                os.kill(worker[0], signal.SIGKILL)
                if also_the_process:
                    os.kill(pid, signal.SIGKILL)
                killed.append(worker[0])
                return
        time.sleep(0.05)
