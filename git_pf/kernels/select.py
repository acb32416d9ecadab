"""Exact k-th largest magnitude of a tensor, in bounded memory.

Job: find the value ``v`` such that exactly ``k`` elements of ``|t|`` are
ranked at or above it (ties broken later by index), without sorting and
without a full-size copy. Non-negative IEEE floats order like their bit
patterns read as integers, so the k-th value is found by a radix select over
those bits: one streamed pass per 16-bit digit (2 passes for fp32, 4 for
fp64), each a ``torch.bincount`` into 65536 bins over block-sized pieces.
The answer is exact and independent of the block size and the device.

May not touch: pygit2, anything in git_pf outside kernels; never modifies
its input.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from .blocks import DEFAULT_BLOCK_ELEMS, Workspace, iter_blocks, single_threaded

_DIGIT = 16
_BINS = 1 << _DIGIT
_INT_OF = {torch.float32: torch.int32, torch.float64: torch.int64}


@dataclass(frozen=True)
class Selection:
    """The k-th largest magnitude and how many elements lie above / on it."""

    value: float  # the k-th largest |t|
    greater: int  # elements with |t| > value
    equal: int  # elements with |t| == value (greater < k <= greater + equal)


def _digit_histogram(t: Tensor, dtype: torch.dtype, shift: int, prefix: int, block_elems: int) -> Tensor:
    """Counts of the 16-bit digit at ``shift`` among elements whose higher bits equal ``prefix``."""
    hist = torch.zeros(_BINS, dtype=torch.int64, device=t.device)
    width, ws = torch.finfo(dtype).bits, Workspace()
    for _, (blk,) in iter_blocks([t], dtype, block_elems, ws):
        bits = torch.abs(blk, out=ws.get("mag", blk)).view(_INT_OF[dtype])
        if shift + _DIGIT < width:
            high = torch.bitwise_right_shift(bits, shift + _DIGIT, out=ws.get("key", bits))
            bits = bits[torch.eq(high, prefix, out=ws.get("hit", bits, torch.bool))]
        key = torch.bitwise_right_shift(bits, shift, out=ws.get("key", bits)).bitwise_and_(_BINS - 1)
        hist += torch.bincount(key, minlength=_BINS)
    return hist


def _pick_digit(hist: Tensor, rank: int) -> tuple[int, int, int]:
    """(digit holding the rank-th largest, count above that digit, count on it)."""
    from_top = hist.flip(0).cumsum(0)
    j = int(torch.searchsorted(from_top, torch.tensor(rank, device=hist.device)))
    digit = _BINS - 1 - j
    on = int(hist[digit])
    return digit, int(from_top[j]) - on, on


@single_threaded
def kth_largest_abs(t: Tensor, k: int, block_elems: int = DEFAULT_BLOCK_ELEMS) -> Selection:
    """Exact k-th largest of ``|t|`` (1 <= k <= t.numel()) by streamed radix select."""
    if not 1 <= k <= t.numel():
        raise ValueError(f"k must be in [1, {t.numel()}], got {k}")
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    width = torch.finfo(dtype).bits
    prefix, rank, greater, on = 0, k, 0, 0
    for shift in range(width - _DIGIT, -1, -_DIGIT):
        hist = _digit_histogram(t, dtype, shift, prefix, block_elems)
        digit, above, on = _pick_digit(hist, rank)
        prefix, rank, greater = (prefix << _DIGIT) | digit, rank - above, greater + above
    value = torch.tensor(prefix, dtype=_INT_OF[dtype]).view(dtype).item()
    return Selection(value=value, greater=greater, equal=on)
