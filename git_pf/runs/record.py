"""``git pf record``: run an agent behind the proxy and write each exchange as a step image.

``Recorder`` is the proxy backend of a recording (and of the live part of
``git pf run``): each request gets an arrival number and a batch (the
arrival of the first exchange in flight with it), the ``StepWriter`` is told
before the request goes upstream (so it captures the world as the agent
left it) and after the response reached the agent (so it writes step N).
A request the upstream never answered gets a 502 and is no step; the draws
made before it go with the next step (``StepWriter.failed``). A blame trial
gives it a sticky tail (recorded exchanges served, and written as steps,
while the requests match them) and a callback that sees each live exchange.

``record`` is the operation: a new branch, step 0, the proxy, the child with
its environment (docs/record.md, "Commands"), and the final image with the
child's exit code. Writes only through the ``StepWriter``.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..image import refs
from ..core.errors import UsageError
from ..layers.trace import exchange
from .llm import wire
from . import child
from .forward import Upstreams, UpstreamDown, forward
from .proxy import Proxy, Reply, Request

DRAIN_S = 30.0  # how long the end of a run waits for exchanges still being written


class Recorder:
    """Forward each request and record it as the next step."""

    def __init__(self, writer, upstreams: Upstreams, first_arrival: int = 1, *, sticky=None, on_live=None,
                 rules=None, profile=None):
        self.writer = writer
        self.upstreams = upstreams
        self.rules = rules  # matching.Rules from the flags, stored with every exchange
        self.profile = profile  # given by --profile, else the first a request's User-Agent picks
        self.sticky = sticky  # a Replayer of recorded exchanges served (and written) while requests match
        self.on_live = on_live  # called with each exchange the upstream answered (a spend meter)
        self._lock = threading.Condition()
        self._next = first_arrival
        self._in_flight = 0
        self._busy = 0
        self._batch = first_arrival
        self.steps = 0
        self.errors: list[tuple[int, str]] = []  # (steps recorded before it, line)

    def _arrive(self) -> tuple[int, int, object]:
        with self._lock:
            arrival = self._next
            self._next += 1
            if self._in_flight == 0:
                self._batch = arrival
            self._in_flight += 1
            self._busy += 1
            return arrival, self._batch, self.writer.arrived(arrival)

    def _match(self, request: Request) -> dict | None:
        """The matching rules this exchange is recorded with (its ``match``), None when there are none."""
        from .profiles import detect

        with self._lock:
            if self.profile is None:
                self.profile = detect(request.header("user-agent"))
            profile, rules = self.profile, self.rules
        if profile is None:
            return rules.to_json() if rules else None
        return dict(profile.match_json(), **((profile.rules | rules).to_json() if rules else {}))

    def handle(self, request: Request, reply: Reply) -> None:
        api = wire.api_of(request.method, request.path)
        up = self.upstreams.for_request(api, request)
        t0 = time.perf_counter()
        arrival, batch, token = self._arrive()
        try:
            try:
                response, live = self._answer(up, request, reply)
            finally:
                with self._lock:
                    self._in_flight -= 1
            entry = {"v": 2, "kind": "exchange", "arrival": arrival, "batch": batch, "api": api,
                     "request": {"method": request.method, "path": request.path, "query": request.query,
                                 "headers": exchange.keep_headers(request.headers),
                                 "body": exchange.body(request.body), "family": request.family},
                     "response": response, "ms": round((time.perf_counter() - t0) * 1000, 3)}
            match = self._match(request)
            if match is not None:
                entry["match"] = match
            self.writer.completed(token, entry)
            with self._lock:
                self.steps += 1
            if live and self.on_live is not None:
                self.on_live(entry)
        except UpstreamDown as e:
            with self._lock:
                self.errors.append((self.steps, str(e)))
            if reply.started:
                raise ConnectionResetError from None  # the stream broke: the agent sees it break
            reply.error(502, f"git-pf proxy: {e}", "upstream_unreachable")
        finally:
            self.writer.failed(token)  # no step (a no-op once it completed): its draws go with the next
            with self._lock:
                self._busy -= 1
                self._lock.notify_all()

    def _answer(self, up, request: Request, reply: Reply) -> tuple[dict, bool]:
        """The response part of the exchange, and whether it came from the upstream: the sticky
        tail's recorded exchange while requests match it, else the upstream's answer."""
        if self.sticky is not None:
            from .replay import serve

            entry = self.sticky.take(request)
            if entry is not None:
                serve(entry, reply)
                return entry["response"], False
        return forward(up, request, reply), True

    def drain(self, timeout: float = DRAIN_S) -> None:
        """Wait until every exchange that arrived is written (or failed)."""
        with self._lock:
            self._lock.wait_for(lambda: self._busy == 0, timeout)

    def failure(self) -> str | None:
        """The line to print when an upstream failure ended the run (no step recorded after it)."""
        with self._lock:
            last = self.errors[-1] if self.errors else None
            return last[1] if last is not None and last[0] == self.steps else None


@dataclass
class RunResult:
    branch: str
    tip: str | None
    steps: int
    exit: int
    upstream_error: str | None = None
    failures: list[str] = field(default_factory=list)
    write_failures: list[str] = field(default_factory=list)  # StepWriter.failures: storage trouble
    steps_lost: int = 0

    def to_json(self) -> dict:
        return {"branch": self.branch, "tip": self.tip, "steps": self.steps, "exit": self.exit,
                "upstream_error": self.upstream_error, "failures": self.failures + self.write_failures,
                "steps_lost": self.steps_lost}

    def write_problem(self) -> str | None:
        """One line when steps or the world could not be written (the agent's run went on)."""
        if not self.write_failures:
            return None
        return (f"{self.steps_lost} step images lost of {self.steps} exchanges recorded "
                f"({self.write_failures[0]}); the agent exited {self.exit}")

    @classmethod
    def of(cls, branch: str, tip: str | None, recorder, code: int, proxy, writer) -> "RunResult":
        """The result of a run a ``StepWriter`` recorded (``record`` and ``run``): the proxy's
        failures, and the steps the writer could not write (``failures``, ``steps_lost``)."""
        return cls(branch, tip, recorder.steps, code, recorder.failure(), list(proxy.failures),
                   list(writer.failures), writer.lost)


def default_branch(git) -> str:
    k = 1
    while refs.branch_tip(git, f"run-{k}") is not None:
        k += 1
    return f"run-{k}"


def world_env(base: dict[str, str], proxy: Proxy, world: Path | None) -> dict[str, str]:
    env = dict(base, **proxy.env())
    if world is not None:
        env["GIT_PF_WORLD"] = str(world)
    return env


def drive(cmd: list[str], env: dict[str, str], recorder: Recorder | None,
          stop: threading.Event | None = None, tick=lambda: None, output=None, group: bool = False) -> int:
    """Run the child until it exits (or ``stop``), then let the recorder finish its steps; its exit code.
    ``output``: where the child's stdout and stderr go (default: ours). ``group``: the child in a
    process group of its own, whatever is left of it killed when it exits (its world is reused)."""
    proc = child.start(cmd, env, output=output, group=group)
    try:
        code = child.wait(proc, stop or threading.Event(), tick)
    finally:
        if group:
            child.end_group(proc)
    if recorder is not None:
        recorder.drain()
    return code


def record(repo, cmd: list[str], *, name: str | None = None, fs_root: Path | None = None,
           upstreams: list[str] = (), inject: bool = True, rules=None, profile=None) -> RunResult:
    """``rules`` (``matching.Rules``) and ``profile`` (``profiles.Profile``; default: picked from the
    first User-Agent a built-in profile knows) are stored with every exchange, for replay to match by."""
    from . import inject as inject_mod
    from .steps import StepWriter
    from .stepworld import place

    git = repo.git
    branch = refs.check_name(name) if name else default_branch(git)
    if refs.branch_tip(git, branch) is not None:
        raise UsageError(f"branch '{branch}' exists; a recording starts a new branch (give --name)")
    if fs_root is not None and not Path(fs_root).is_dir():
        raise UsageError(f"'{fs_root}' is not a directory", param="fs_root")
    ups = Upstreams.from_repo(git, list(upstreams))
    child.start_check(cmd, os.environ)
    writer = StepWriter(repo, branch, Path(fs_root).resolve() if fs_root is not None else None)
    try:
        writer.start(place(fs_root))
        recorder = Recorder(writer, ups, rules=rules, profile=profile)
        with Proxy(recorder) as proxy:
            env = inject_mod.child_env(world_env(dict(os.environ), proxy, fs_root), mode="record",
                                       channel=writer.channel, replay_file=None, inject=inject)
            code = drive(cmd, env, recorder)
        info = writer.finish(code)
    finally:
        writer.close()
    return RunResult.of(branch, info.id, recorder, code, proxy, writer)
