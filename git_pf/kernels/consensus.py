"""TIES consensus on one block: sign election and disjoint (agreeing-only) mean.

Job: given the sparsified blocks ``t_i`` of N task vectors and their weights
``w_i``, elect a sign per element and average only the entries that agree:

    u_i = w_i * t_i  (elect="weighted", mergekit)   or   t_i  (elect="raw", peft)
    e   = +1 where sum_i u_i >= 0, else -1          (sign of the summed magnitudes)
    a_i = [u_i * e > 0]                              (agrees; zeros never agree)
    num = sum_i w_i * t_i * a_i
    den = sum_i a_i (normalize="count") | sum_i w_i * a_i ("weight") | 1 ("none")
    out = num / (den, with 0 replaced by 1)

May not touch: pygit2, anything in git_pf outside kernels; its input blocks
are never modified in place.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .blocks import Workspace

ELECT = ("raw", "weighted")
NORMALIZE = ("count", "weight", "none")


def scaled(t: Tensor, w: float, out: Tensor) -> Tensor:
    """``w * t`` written into ``out`` (``t`` itself when w == 1)."""
    return t if w == 1.0 else torch.mul(t, w, out=out)


def elected_sign(us: Sequence[Tensor], ws: Workspace) -> Tensor:
    """+1.0 where the sum of ``us`` is >= 0 (-0.0 included), else -1.0."""
    total = ws.get("total", us[0]).copy_(us[0])
    for u in us[1:]:
        total += u
    return torch.sign(total, out=total).add_(0.5).sign_()  # {-1, 0, 1} -> {-1, 1, 1}


def disjoint_merge(
    us: Sequence[Tensor], scales: Sequence[float], weights: Sequence[float], sign: Tensor, normalize: str,
    ws: Workspace,
) -> Tensor:
    """Mean of ``scales[i] * us[i]`` over entries agreeing with ``sign``.

    Masks are 0./1. floats: on CPU, float arithmetic is several times faster
    than bool masks and type promotion.
    """
    num = ws.get("num", sign).zero_()
    den = None if normalize == "none" else ws.get("den", sign).zero_()
    agreed, hit = ws.get("agreed", sign), ws.get("hit", sign)
    for u, v, w in zip(us, scales, weights):
        torch.mul(u, sign, out=agreed).clamp_(min=0)  # > 0 exactly where u agrees with the sign
        if den is not None:
            den.add_(torch.sign(agreed, out=hit), alpha=w if normalize == "weight" else 1.0)
        num += scaled(agreed, v, agreed)
    num *= sign
    if den is None:
        return num
    if normalize == "count":
        return num.div_(den.clamp_(min=1.0))
    return num.div_(den.add_(torch.eq(den, 0, out=hit)))  # 0 -> 1


def ties_combine(
    ts: Sequence[Tensor], weights: Sequence[float], ws: Workspace, elect: str = "raw", normalize: str = "count"
) -> Tensor:
    """TIES consensus of sparsified blocks ``ts`` (see module docstring); a workspace view."""
    if elect not in ELECT or normalize not in NORMALIZE:
        raise ValueError(f"elect must be one of {ELECT}, normalize one of {NORMALIZE}")
    weighted = elect == "weighted"
    us = [scaled(t, w, ws.get(("u", i), t)) for i, (t, w) in enumerate(zip(ts, weights))] if weighted else list(ts)
    scales = [1.0] * len(ts) if weighted else list(weights)
    return disjoint_merge(us, scales, weights, elected_sign(us, ws), normalize, ws)
