"""What a blame costs (docs/blame.md, "Cost"): token usage, prices, the estimate and the spend meter.

Usage is read from a recorded response body (``wire.usage``: OpenAI chat
``usage.prompt_tokens`` / ``completion_tokens``, responses and Anthropic
``usage.input_tokens`` / ``output_tokens``, streamed bodies assembled first).
Prices come from git config ``pf.price.<model>.input`` / ``.output`` in USD per
million tokens, ``pf.price.default.*`` for any other model. ``estimate`` is
trials x the recorded usage of the steps each trial runs again; ``Meter`` adds
up what live responses cost and trips at the budget. Reads config; writes
nothing.
"""
from __future__ import annotations

import math
import threading

from ..core.config import get_str
from ..core.errors import UsageError
from ..runs.llm import wire

PER = 1_000_000  # prices are per million tokens


class Prices:
    """The price table of a repository's git config."""

    def __init__(self, git):
        self.git = git
        self._cache: dict[str, tuple[float, float] | None] = {}

    def _value(self, key: str) -> float | None:
        text = get_str(self.git, key)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"git config {key} must be a price in USD per million tokens, not '{text}'")
        return value

    def of(self, model: str) -> tuple[float, float] | None:
        """(input, output) USD per million tokens for ``model``; None when no price is known."""
        if model not in self._cache:
            found = None
            for name in ([model] if model else []) + ["default"]:
                tin, tout = self._value(f"pf.price.{name}.input"), self._value(f"pf.price.{name}.output")
                if tin is not None or tout is not None:
                    found = (tin or 0.0, tout or 0.0)
                    break
            self._cache[model] = found
        return self._cache[model]

    def cost(self, entry: dict) -> float | None:
        """USD of one exchange (its usage at its model's price); None when no price is known."""
        u = wire.usage(entry)
        price = self.of(u["model"])
        if price is None:
            return None
        return (u["input_tokens"] * price[0] + u["output_tokens"] * price[1]) / PER

    def missing(self, entries: list[dict]) -> list[str]:
        """The models of ``entries`` that have no price."""
        return sorted({wire.usage(e)["model"] or "(unnamed)" for e in entries if self.cost(e) is None})


def rerun_steps(entries: list[dict], step: int, resample: bool) -> list[dict]:
    """The recorded exchanges a trial at ``step`` may send again: every later step (the tail,
    live in the worst case), and the step itself when it is resampled."""
    return [e for e in entries if e["step"] > step or (resample and e["step"] == step)]


def estimate(prices: Prices, entries: list[dict], trials: list[tuple[int, int]], resample: bool) -> float | None:
    """USD the ``trials`` ((step, k) pairs) may spend; None when a price is missing."""
    total = 0.0
    for step, _ in trials:
        for e in rerun_steps(entries, step, resample):
            c = prices.cost(e)
            if c is None:
                return None
            total += c
    return total


class Meter:
    """The live spend of one blame: each live exchange's cost added, tripped at the budget."""

    def __init__(self, prices: Prices, budget: float | None):
        self.prices = prices
        self.budget = budget
        self.spent = 0.0
        self.tripped = threading.Event()  # the budget is reached
        self.stopping = threading.Event()  # the budget is reached, or the blame is interrupted: no trial finishes
        self._lock = threading.Lock()
        self._stops: set[threading.Event] = set()

    def add(self, entry: dict) -> float:
        """Count one live exchange; its cost (0 when no price is known)."""
        c = self.prices.cost(entry) or 0.0
        with self._lock:
            self.spent += c
            if self.budget is not None and self.spent >= self.budget and not self.tripped.is_set():
                self.tripped.set()
                self._stop_all()
        return c

    def halt(self) -> None:
        """Stop every running trial (an interrupt, or a trial that failed)."""
        with self._lock:
            self._stop_all()

    def _stop_all(self) -> None:
        self.stopping.set()
        for stop in self._stops:
            stop.set()

    def watch(self, stop: threading.Event) -> None:
        """Set ``stop`` when the budget is reached (at once when it already is)."""
        with self._lock:
            self._stops.add(stop)
            if self.stopping.is_set():
                stop.set()

    def unwatch(self, stop: threading.Event) -> None:
        with self._lock:
            self._stops.discard(stop)
