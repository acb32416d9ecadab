"""LoRA algebra: dense ΔW from factors, and back to rank r by truncated SVD.

Job, for one module with peft factors A (r x in) and B (out x r):

* ``lora_delta``: ΔW = (B @ A) * scale, scale = alpha / r (alpha / sqrt(r)
  with rsLoRA), computed in float32 (float64 if a factor is).
* ``refactor``: ΔW ≈ U_r S_r V_r^T; returns A' = V_r^T and B' = U_r S_r / scale,
  so that loading (A', B') with the same alpha and r reproduces the best
  rank-r approximation of ΔW; plus the relative error
  ||ΔW - B' A' scale||_F / ||ΔW||_F (0 for ΔW = 0). The SVD is exact
  (``torch.linalg.svd``) when min(out, in) <= ``EXACT_SVD_MAX``; otherwise a
  randomized range finder with power iterations whose test matrix comes from
  a CPU ``torch.Generator`` seeded by the caller (never the global RNG).
  Singular vector signs are fixed (largest-|.| entry of each U column
  positive), so the factors are canonical, not just their product.

May not touch: pygit2, anything in git_pf outside kernels, the global torch
RNG; inputs are never modified in place.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

#: exact SVD up to this many rows/columns (the smaller side).
EXACT_SVD_MAX = 1024
#: randomized SVD: extra columns and power iterations.
OVERSAMPLE = 16
POWER_ITERS = 4


@dataclass(frozen=True)
class Factors:
    """A rank-r LoRA pair and how well it reproduces the ΔW it came from."""

    A: Tensor  # (r, in)
    B: Tensor  # (out, r)
    error: float  # ||ΔW - B A scale||_F / ||ΔW||_F
    norm: float  # ||ΔW||_F
    residual: float  # ||ΔW - B A scale||_F


def lora_scale(r: int, alpha: float, use_rslora: bool = False) -> float:
    """peft's scaling: alpha / r, or alpha / sqrt(r) with rsLoRA."""
    return alpha / math.sqrt(r) if use_rslora else alpha / r


def lora_delta(A: Tensor, B: Tensor, scale: float) -> Tensor:
    """ΔW = (B @ A) * scale from 2-D factors A (r x in), B (out x r)."""
    dtype = torch.float64 if torch.float64 in (A.dtype, B.dtype) else torch.float32
    return (B.to(dtype) @ A.to(dtype)).mul_(scale)


def _canonical_signs(U: Tensor, Vh: Tensor) -> tuple[Tensor, Tensor]:
    """Flip each singular pair so that the largest-|.| entry of U's column is positive."""
    idx = U.abs().argmax(dim=0, keepdim=True)
    sign = torch.where(U.gather(0, idx) < 0, -1.0, 1.0).to(U.dtype)
    return U * sign, Vh * sign.T


def _randomized_svd(M: Tensor, q: int, seed: int) -> tuple[Tensor, Tensor, Tensor]:
    """Top-q SVD of M by a seeded randomized range finder with power iterations."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    omega = torch.randn(M.shape[1], q, generator=gen, dtype=M.dtype).to(M.device)
    Q = torch.linalg.qr(M @ omega).Q
    for _ in range(POWER_ITERS):
        Q = torch.linalg.qr(M @ torch.linalg.qr(M.T @ Q).Q).Q
    Us, S, Vh = torch.linalg.svd(Q.T @ M, full_matrices=False)
    return Q @ Us, S, Vh


def truncated_svd(M: Tensor, rank: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """(U, S, Vh) of the best rank-``rank`` approximation, canonical signs."""
    small = min(M.shape)
    q = min(small, rank + OVERSAMPLE)
    if small <= EXACT_SVD_MAX or 2 * q >= small:
        U, S, Vh = torch.linalg.svd(M, full_matrices=False)
    else:
        U, S, Vh = _randomized_svd(M, q, seed)
    r = min(rank, S.numel())
    U, Vh = _canonical_signs(U[:, :r], Vh[:r])
    return U, S[:r], Vh


def _pad_rows(t: Tensor, rows: int) -> Tensor:
    return torch.cat([t, t.new_zeros(rows - t.shape[0], *t.shape[1:])]) if t.shape[0] < rows else t


def refactor(delta: Tensor, rank: int, scale: float, seed: int = 0) -> Factors:
    """Rank-``rank`` LoRA factors (A, B) with (B @ A) * scale ≈ ``delta`` (2-D)."""
    M = delta.to(torch.float64 if delta.dtype == torch.float64 else torch.float32)
    U, S, Vh = truncated_svd(M, rank, seed)
    A = _pad_rows(Vh, rank).contiguous()
    B = (_pad_rows((U * S).T, rank).T / scale).contiguous()
    norm = float(torch.linalg.matrix_norm(M))
    residual = float(torch.linalg.matrix_norm(M - lora_delta(A, B, scale)))
    return Factors(A=A, B=B, error=residual / norm if norm else 0.0, norm=norm, residual=residual)
