"""Merge methods over task vectors: linear, task arithmetic, TIES, DARE, DARE-TIES.

Job: combine N task vectors (deltas against a common ancestor) name by name.
For each tensor name the inputs are sparsified (sparsify.py), combined
(``sum_i w_i t_i`` or the TIES consensus of consensus.py), normalised and
scaled by ``lam``, block by block (blocks.py), so extra memory is a few
blocks per tensor plus the output.

    method          sparsify                 combine     default normalize
    linear          -                        sum         weight (sum w_i)
    task_arithmetic -                        sum         none
    ties            magnitude trim (density) consensus   count
    dare_linear     DARE drop (drop)         sum         none
    dare_ties       DARE drop (drop)         consensus   count

``dare`` is an alias of ``dare_linear``. Same inputs + options (seed
included) give bitwise the same output on the same device and thread count.

May not touch: pygit2, anything in git_pf outside kernels; never modifies
its inputs.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Optional

import torch
from torch import Tensor

from .blocks import DEFAULT_BLOCK_ELEMS, Workspace, map_blocks, single_threaded
from .consensus import ELECT, NORMALIZE, scaled, ties_combine
from .sparsify import Identity, derive_seed, dropper, trimmer

#: method -> (sparsification, uses TIES consensus, default normalize)
METHODS: dict[str, tuple[Optional[str], bool, str]] = {
    "linear": (None, False, "weight"),
    "task_arithmetic": (None, False, "none"),
    "ties": ("magnitude", True, "count"),
    "dare_linear": ("random", False, "none"),
    "dare_ties": ("random", True, "count"),
}
ALIASES = {"dare": "dare_linear"}


@dataclass(frozen=True)
class MergeOptions:
    """Everything a merge depends on besides its inputs."""

    method: str = "ties"
    weights: Optional[Sequence[float]] = None  # None: 1.0 each
    density: float = 1.0  # TIES: fraction of magnitudes kept
    drop: float = 0.0  # DARE: drop probability p
    lam: float = 1.0  # final scale
    seed: int = 0  # DARE masks (and randomized SVD) derive from it
    rescale: bool = True  # DARE: divide survivors by 1 - p
    elect: str = "raw"  # TIES sign election on t_i ("raw") or w_i t_i ("weighted")
    normalize: Optional[str] = None  # "count" | "weight" | "none"; None: method default
    block_elems: int = field(default=DEFAULT_BLOCK_ELEMS, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "method", ALIASES.get(self.method, self.method))
        if self.weights is not None:
            object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if self.method not in METHODS:
            raise ValueError(f"unknown merge method {self.method!r}; one of {sorted(METHODS)}")
        if self.elect not in ELECT or self.normalize not in NORMALIZE + (None,):
            raise ValueError(f"elect must be one of {ELECT}, normalize one of {NORMALIZE}")
        if not (0 <= self.density <= 1 and 0 <= self.drop <= 1):
            raise ValueError(f"density and drop must be in [0, 1], got {self.density}, {self.drop}")

    @property
    def norm(self) -> str:
        return self.normalize or METHODS[self.method][2]

    def weights_for(self, n: int) -> list[float]:
        ws = [1.0] * n if self.weights is None else list(self.weights)
        if len(ws) != n:
            raise ValueError(f"{len(ws)} weights for {n} inputs")
        return ws


def _sparsifiers(tensors: Sequence[Tensor], opts: MergeOptions, name: str) -> list:
    kind = METHODS[opts.method][0]
    if kind == "magnitude":
        return [trimmer(t, opts.density, opts.block_elems) for t in tensors]
    if kind == "random":
        seeds = [derive_seed(opts.seed, name, i) for i in range(len(tensors))]
        return [dropper(opts.drop, s, opts.rescale) for s in seeds]
    return [Identity()] * len(tensors)


def _linear_divisor(weights: Sequence[float], norm: str) -> float:
    if norm == "count":
        return float(len(weights))
    total = sum(weights)
    return total if norm == "weight" and abs(total) >= 1e-8 else 1.0


def weighted_sum(ts: Sequence[Tensor], weights: Sequence[float], ws: Workspace, div: float = 1.0) -> Tensor:
    """``sum_i w_i t_i / div`` accumulated in input order; a workspace view."""
    acc = torch.mul(ts[0], weights[0], out=ws.get("acc", ts[0]))
    for t, w in zip(ts[1:], weights[1:]):
        acc += scaled(t, w, ws.get("term", t))
    return acc if div == 1.0 else acc.div_(div)


def _combiner(weights: list[float], opts: MergeOptions):
    """Block function: sparsified blocks -> merged (normalised, lam-scaled) block."""
    if METHODS[opts.method][1]:
        merge = lambda ts, ws: ties_combine(ts, weights, ws, opts.elect, opts.norm)  # noqa: E731
    else:
        div = _linear_divisor(weights, opts.norm)
        merge = lambda ts, ws: weighted_sum(ts, weights, ws, div)  # noqa: E731
    return merge if opts.lam == 1 else (lambda ts, ws: merge(ts, ws).mul_(opts.lam))


def _check_same(tensors: Sequence[Tensor], name: str) -> None:
    head = tensors[0]
    for t in tensors:
        if t.shape != head.shape or t.device != head.device:
            raise ValueError(f"{name or 'tensor'}: shape/device mismatch {tuple(head.shape)} vs {tuple(t.shape)}")
        if not t.is_floating_point():
            raise TypeError(f"{name or 'tensor'}: merging needs floating-point tensors")


@single_threaded
def merge_tensors(tensors: Sequence[Tensor], opts: MergeOptions, name: str = "") -> Tensor:
    """Merge same-shaped task vectors into one (dtype promoted over the inputs)."""
    if not tensors:
        raise ValueError("nothing to merge")
    _check_same(tensors, name)
    sparse = _sparsifiers(tensors, opts, name)
    combine = _combiner(opts.weights_for(len(tensors)), opts)
    out_dtype = functools.reduce(torch.promote_types, (t.dtype for t in tensors))

    def block(bs: list[Tensor], ws: Workspace) -> Tensor:
        return combine([s(b, ws, i) for i, (s, b) in enumerate(zip(sparse, bs))], ws)

    return map_blocks(block, tensors, out_dtype, opts.block_elems)


def _zeros_like_any(deltas: Sequence[Mapping[str, Tensor]], name: str) -> Tensor:
    """A zero-stride zero tensor shaped like ``name`` in the first dict having it."""
    t = next(d[name] for d in deltas if name in d)
    return torch.zeros((), dtype=t.dtype, device=t.device).expand(t.shape)


def merge_deltas(
    method: str, deltas: Sequence[Mapping[str, Tensor]], **options
) -> dict[str, Tensor]:
    """Merge N state dicts of task vectors name by name; a missing name counts as zero.

    ``options`` are the fields of ``MergeOptions`` (weights, density, drop, lam,
    seed, rescale, elect, normalize, block_elems). Output names are the union
    of the input names, in first-seen order.
    """
    opts = MergeOptions(method=method, **options)
    names = list(dict.fromkeys(n for d in deltas for n in d))
    return {
        n: merge_tensors([d[n] if n in d else _zeros_like_any(deltas, n) for d in deltas], opts, n)
        for n in names
    }
