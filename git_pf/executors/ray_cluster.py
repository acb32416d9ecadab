"""The Ray executor: each item is a Ray task on the cluster (``--executor ray``, docs/scale.md).

Ray is the optional extra ``git-pf[ray]``, imported here only. The cluster is
``--ray-address``, else ``RAY_ADDRESS``, else what ``ray.init()`` finds or
starts. A task whose worker process dies is retried by Ray (``max_retries``);
an exception the task raises is not retried: a ``PfError`` comes back as
itself (its one line), anything else as one line naming it.
"""
from __future__ import annotations

import os
import socket

from ..core.errors import PfError, UsageError

EXTRA = "pip install 'git-pf[ray]'"
RETRIES = 3  # a worker killed under a task: Ray runs the task again, this many times at most


def _import_ray():
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed ({EXTRA})") from None
    return ray


def _probe(address: str | None, what: str) -> None:
    """One line, at once, when nothing listens at a ``host:port`` address (Ray itself would retry
    for minutes, printing its own warnings)."""
    if not address or address in ("auto", "local"):
        return
    where = address.split("://", 1)[-1]
    host, _, port = where.rpartition(":")
    if not host or not port.isdigit():
        raise UsageError(f"{what}: '{address}' is not HOST:PORT (or ray://HOST:PORT, auto, local)")
    try:
        socket.create_connection((host.strip("[]"), int(port)), timeout=5).close()
    except OSError as e:
        raise PfError(f"cannot connect to Ray at {address}: {e.strerror or e}", 1) from None


def _quiet_stdout() -> None:
    """Ray's driver prints the raylet's error messages (a worker that died under a task, which Ray
    then retries) on stdout, where a command's output goes: make each one line of ours on stderr."""
    import sys

    from ray._private import worker

    if getattr(worker.print_to_stdstream, "_pf", False):
        return
    original = worker.print_to_stdstream

    def to_stderr(data, ignore_prefix):
        if data.get("is_err") or data.get("pid") != "raylet":
            return original(data, ignore_prefix)
        for line in data.get("lines", []):
            first = " ".join(str(line).split())
            first = first.split(". ")[0][:200]
            if first:
                print(f"git pf: ray: {first}", file=sys.stderr, flush=True)
    to_stderr._pf = True
    worker.print_to_stdstream = to_stderr


class RayExecutor:
    name = "ray"
    remote = True

    def __init__(self, address: str | None = None):
        self.ray = _import_ray()
        self.address = address

    def start(self) -> None:
        self._connect()

    def width(self) -> int:
        self._connect()
        return max(1, int(self.ray.cluster_resources().get("CPU", 1)))

    def _connect(self) -> None:
        ray = self.ray
        if ray.is_initialized():
            return
        _probe(self.address, "--ray-address") if self.address else _probe(os.environ.get("RAY_ADDRESS"), "RAY_ADDRESS")
        _quiet_stdout()
        try:
            ray.init(address=self.address, log_to_driver=False, logging_level="ERROR")
        except (ConnectionError, RuntimeError, ValueError) as e:
            where = self.address or "the default cluster"
            raise PfError(f"cannot connect to Ray at {where}: {' '.join(str(e).split())[:300]}", 1) from None

    def _get(self, ref):
        ray = self.ray
        try:
            return ray.get(ref)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, PfError):
                raise cause from None
            raise PfError(f"a task failed on the cluster: {type(cause).__name__}: "
                          f"{' '.join(str(cause).split())[:300]}", 1) from None
        except ray.exceptions.RayError as e:  # its worker died more often than it is retried, a lost node
            raise PfError(f"a task was lost on the cluster: {type(e).__name__}: "
                          f"{' '.join(str(e).split())[:300]}", 1) from None

    def map(self, fn, items, on_result=None, on_error=None) -> list:
        ray = self.ray
        self._connect()
        items = list(items)
        task = ray.remote(num_cpus=1, max_retries=RETRIES, retry_exceptions=False)(fn)
        pending = {task.remote(item): i for i, item in enumerate(items)}
        out: list = [None] * len(items)
        try:
            while pending:
                done, _ = ray.wait(list(pending), num_returns=1)
                more, _ = ray.wait([r for r in pending if r not in done], num_returns=len(pending) - len(done),
                                   timeout=0) if len(pending) > len(done) else ([], [])
                for ref in [*done, *more]:
                    i = pending.pop(ref)
                    out[i] = self._get(ref)
                    if on_result is not None:
                        on_result(out[i])
        except BaseException as e:
            if on_error is not None:
                on_error(e)
            for ref in pending:
                ray.cancel(ref)
            raise
        return out
