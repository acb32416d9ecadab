"""Options of a model merge (method, density, drop, weights, seed, rank), validated.

Read from ``git pf merge``'s ``ctx.options`` (keys ``model.method``,
``model.density``, ``model.drop``, ``model.weights``, ``model.seed``,
``model.rank``) or from ``git pf model-merge`` flags; turned into the kernel
options and the ``Pf-Merge:`` trailer that records them (the DARE seed
included, so a merge can be reproduced); ``MergeRefused`` is how a numeric
merge says its inputs cannot be combined. Pure; never imports torch.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ...core.errors import UsageError

# CLI name -> kernel method name
METHODS = {"ties": "ties", "dare": "dare_linear", "dare_linear": "dare_linear", "dare_ties": "dare_ties",
           "linear": "linear", "task_arithmetic": "task_arithmetic"}
DEFAULT_METHOD = "ties"
DEFAULT_DENSITY = 1.0  # as mergekit: keep every entry unless told otherwise
DEFAULT_DROP = 0.0


class MergeRefused(Exception):
    """The inputs cannot be merged numerically; the message is one line."""


def _float(value: Any, flag: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise UsageError(f"{flag}: '{value}' is not a number") from None
    if not math.isfinite(out):
        raise UsageError(f"{flag}: '{value}' is not a finite number")
    return out


def _int(value: Any, flag: str, low: int) -> int:
    try:
        out = int(str(value).strip()) if not isinstance(value, int) else value
    except ValueError:
        raise UsageError(f"{flag}: '{value}' is not an integer") from None
    if out < low:
        raise UsageError(f"{flag}: must be at least {low} (got {out})")
    return out


def parse_weights(value: Any, flag: str = "--weights") -> tuple[float, ...] | None:
    if value is None or value == "" or value == ():
        return None
    parts = value.split(",") if isinstance(value, str) else list(value)
    return tuple(_float(p, flag) for p in parts)


@dataclass(frozen=True)
class MergeSpec:
    method: str = DEFAULT_METHOD
    density: float | None = None
    drop: float | None = None
    weights: tuple[float, ...] | None = None
    seed: int = 0
    rank: int | None = None

    @classmethod
    def parse(cls, method=None, density=None, drop=None, weights=None, seed=None, rank=None,
              flags: tuple[str, ...] = ("--method", "--density", "--drop", "--weights", "--seed", "--rank")) -> "MergeSpec":
        m = (method or DEFAULT_METHOD).strip().lower().replace("-", "_")
        if m not in METHODS:
            raise UsageError(f"{flags[0]}: unknown method '{method}' (choose from ties, dare, dare_ties, linear)")
        spec = cls(
            method=m,
            density=None if density is None else _float(density, flags[1]),
            drop=None if drop is None else _float(drop, flags[2]),
            weights=parse_weights(weights, flags[3]),
            seed=0 if seed is None else _int(seed, flags[4], 0),
            rank=None if rank is None else _int(rank, flags[5], 1),
        )
        if spec.density is not None and not 0.0 < spec.density <= 1.0:
            raise UsageError(f"{flags[1]}: must be in (0, 1] (got {spec.density:g})")
        if spec.drop is not None and not 0.0 <= spec.drop < 1.0:
            raise UsageError(f"{flags[2]}: must be in [0, 1) (got {spec.drop:g})")
        return spec

    @classmethod
    def from_options(cls, options: dict) -> "MergeSpec":
        """From ``git pf merge``'s context options (``model.*`` keys; absent or None = default)."""
        keys = ("method", "density", "drop", "weights", "seed", "rank")
        flags = ("--model-method", "--density", "--drop", "--weights", "--seed", "--rank")
        return cls.parse(*(options.get(f"model.{k}") for k in keys), flags=flags)

    @property
    def kernel_method(self) -> str:
        return METHODS[self.method]

    @property
    def uses_dare(self) -> bool:
        return self.kernel_method in ("dare_linear", "dare_ties")

    @property
    def effective_density(self) -> float:
        return DEFAULT_DENSITY if self.density is None else self.density

    @property
    def effective_drop(self) -> float:
        """DARE's drop p: --drop, else 1 - --density, else the default."""
        if self.drop is not None:
            return self.drop
        return 1.0 - self.density if self.density is not None else DEFAULT_DROP

    def check_sides(self, n: int) -> None:
        if self.weights is not None and len(self.weights) != n:
            raise UsageError(f"{len(self.weights)} weights given for {n} adapters", param="weights")

    def kernel_options(self) -> dict:
        out: dict = {"seed": self.seed}
        if self.weights is not None:
            out["weights"] = list(self.weights)
        if self.kernel_method in ("ties",):
            out["density"] = self.effective_density
        if self.uses_dare:
            out["drop"] = self.effective_drop
        return out

    def to_json(self) -> dict:
        out = {"method": self.method, "seed": self.seed, "rank": self.rank,
               "weights": list(self.weights) if self.weights is not None else None}
        if self.kernel_method == "ties":
            out["density"] = self.effective_density
        if self.uses_dare:
            out["drop"] = self.effective_drop
        return out

    def trailer(self, rank: int | None = None) -> str:
        """``model <method> seed=N [density=..] [drop=..] [weights=..] [rank=..]``."""
        parts = ["model", self.method, f"seed={self.seed}"]
        if self.kernel_method == "ties":
            parts.append(f"density={self.effective_density:g}")
        if self.uses_dare:
            parts.append(f"drop={self.effective_drop:g}")
        if self.weights is not None:
            parts.append("weights=" + ",".join(f"{w:g}" for w in self.weights))
        if rank is not None:
            parts.append(f"rank={rank}")
        return " ".join(parts)
