"""``git pf replay``: serve a recorded run back to the same program and check it asks the same.

``Replayer`` is the proxy backend: each request is matched by its identity
(``matching.request_key``: canonical JSON, redacted, ``--ignore-field`` paths
dropped) against the unserved exchanges of the current batch (exchanges
that were in flight together may come in any order), then the next batch.
The match is answered with the recorded status, headers and body, or its
chunks (with their delays under ``--realtime``). A request that matches
nothing, or comes after the last exchange, is a mismatch: it gets a 599,
the step and the structured diff are kept, and the run is stopped. With a
world check (``stepworld.WorldCheck``), a request that matches is answered
only when the world is that step's as recorded (checked for an exchange
alone in its batch: concurrent tools leave no single world per request);
otherwise it is a world divergence, answered and stopped the same way.

``replay`` is the operation: the first step's world checked out into a
fresh directory, the recorded draws and effects handed to the in-process
hook, the child run, and the bit-exact report (docs/record.md, "Commands").
Writes no images; its files are the checkout and a temporary channel.
"""
from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..layers.trace import exchange, matching
from .proxy import Proxy, Reply, Request

MISMATCH_STATUS = 599


def serve(entry: dict, reply: Reply, realtime: bool = False) -> None:
    """Answer with a recorded response: its status, kept headers and body or chunks."""
    resp = entry["response"]
    headers = list(resp.get("headers", {}).items())
    chunks = resp.get("chunks")
    if chunks is None:
        if realtime:
            time.sleep(max(0.0, float(entry.get("ms") or 0)) / 1000)
        return reply.whole(resp["status"], headers, exchange.body_bytes(resp.get("body")))
    reply.start(resp["status"], headers)
    for chunk in chunks:
        if realtime:
            time.sleep(max(0.0, float(chunk.get("ms") or 0)) / 1000)
        reply.chunk(exchange.body_bytes(chunk.get("data")))
    reply.end()


def live_request(request: Request) -> dict:
    return {"method": request.method, "path": request.path, "query": request.query, "body": request.body}


@dataclass
class Mismatch:
    step: int
    line: str
    diff: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"step": self.step, "line": self.line, "diff": self.diff}


class Replayer:
    """Serve ``entries`` (v2 exchanges) by request identity within their batch."""

    def __init__(self, entries: list[dict], ignore: tuple = (), realtime: bool = False,
                 stop: threading.Event | None = None, world_check=None):
        self.ignore = matching.as_rules(ignore) | matching.rules_of(entries)  # the flags' and the run's own
        self.world_check = world_check  # a stepworld.WorldCheck, or None
        self.world: object | None = None  # the first world divergence (a stepworld.WorldDivergence)
        self.realtime = realtime
        self.stop = stop or threading.Event()
        self.total = len(entries)
        batches: dict[int, list[dict]] = {}
        for e in sorted(entries, key=lambda e: e["arrival"]):
            batches.setdefault(e["batch"], []).append(e)
        self._batches = [batches[b] for b in sorted(batches)]
        self._alone = {id(b[0]) for b in self._batches if len(b) == 1}
        self._keys = {id(e): self._key(e["request"]) for e in entries}
        self._lock = threading.Lock()
        self._done = 0  # batches fully taken
        self.served = 0
        self.mismatch: Mismatch | None = None
        self.first_api = min(entries, key=lambda e: e["arrival"])["api"] if entries else None

    def _key(self, req: dict) -> str:
        return matching.request_key(req["method"], req["path"], exchange.body_bytes(req.get("body")), self.ignore)

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self._done >= len(self._batches)

    def take(self, request: Request) -> dict | None:
        """The recorded exchange this request asks for (None: a mismatch, now recorded)."""
        key = matching.request_key(request.method, request.path, request.body, self.ignore)
        with self._lock:
            if self.mismatch is not None:
                return None
            while self._done < len(self._batches):
                pending = self._batches[self._done]
                for i, e in enumerate(pending):
                    if self._keys[id(e)] == key:
                        del pending[i]
                        if not pending:
                            self._done += 1
                        return e
                if pending:
                    break
                self._done += 1
            self.mismatch = self._mismatch(request)
        self.stop.set()
        return None

    def _mismatch(self, request: Request) -> Mismatch:
        if self._done >= len(self._batches):
            step = self.total + 1
            return Mismatch(step, f"step {step}: a request past the end of the tape ({self.total} exchanges): "
                                  f"{request.method} {request.path}")
        expected = min(self._batches[self._done], key=lambda e: e["step"])
        diff = matching.diff_requests(expected["request"], live_request(request), self.ignore)
        where = f" at {diff[0]['path']}" if diff else ""
        return Mismatch(expected["step"], f"step {expected['step']}: the request differs from the recorded one{where}",
                        diff)

    def handle(self, request: Request, reply: Reply) -> None:
        if self.world is not None:  # stopping after a world divergence: a retry is served nothing
            return reply.error(MISMATCH_STATUS, f"git-pf replay: {self.world.line}", "replay_divergence")
        entry = self.take(request)
        if entry is None:
            return reply.error(MISMATCH_STATUS, f"git-pf replay: {self.mismatch.line}", "replay_mismatch")
        if self.world_check is not None and id(entry) in self._alone:
            differs = self.world_check.check(entry["step"])
            if differs is not None:
                with self._lock:
                    self.world = self.world or differs
                self.stop.set()
                return reply.error(MISMATCH_STATUS, f"git-pf replay: {differs.line}", "replay_divergence")
        serve(entry, reply, self.realtime)
        with self._lock:
            self.served += 1
