"""Sparsification of one task vector: magnitude trim (TIES) and DARE drop.

Job: per input tensor, build a stateful block function that is fed the
tensor's blocks in row-major order (see blocks.py) and returns them sparsified:

* ``Trim`` keeps the ``k = max(1, int(density * n))`` largest magnitudes,
  exactly ``k`` of them: the threshold is the exact k-th largest ``|x|``
  (select.py, no sort); elements tied on the threshold are kept in index
  order until ``k`` is reached.
* ``Drop`` (DARE) keeps each element with probability ``1 - p`` and rescales
  kept ones by ``1 / (1 - p)``. The mask is ``torch.bernoulli`` of a
  ``1 - p`` filled block drawn from a CPU ``torch.Generator`` seeded with
  ``derive_seed(seed, name, index)``; the draws are consumed in row-major
  order, so the mask is the same for any block size and on any device.

May not touch: pygit2, anything in git_pf outside kernels, the global torch
RNG; inputs are never modified in place.
"""

from __future__ import annotations

import hashlib

import torch
from torch import Tensor

from .blocks import DEFAULT_BLOCK_ELEMS, Workspace, map_blocks, single_threaded
from .select import kth_largest_abs


def derive_seed(seed: int, name: str, index: int = 0) -> int:
    """63-bit seed: first 8 bytes of sha256(f"{seed}/{index}/{name}"), big-endian."""
    digest = hashlib.sha256(f"{int(seed)}/{int(index)}/{name}".encode()).digest()
    return int.from_bytes(digest[:8], "big") & ((1 << 63) - 1)


def keep_count(density: float, numel: int) -> int:
    """How many elements a magnitude trim keeps: max(1, int(density * n)), 0 if density <= 0."""
    if density <= 0 or numel == 0:
        return 0
    return min(numel, max(1, int(density * numel)))


class Identity:
    """No sparsification (returns the block itself: callers treat it as read-only)."""

    def __call__(self, block: Tensor, ws: Workspace, slot: int) -> Tensor:
        return block


class Zero:
    """Everything trimmed (density <= 0 or drop >= 1)."""

    def __call__(self, block: Tensor, ws: Workspace, slot: int) -> Tensor:
        return ws.get(("t", slot), block).zero_()


class Trim:
    """Keep exactly the k largest magnitudes of one tensor, block by block."""

    def __init__(self, t: Tensor, k: int, block_elems: int = DEFAULT_BLOCK_ELEMS):
        sel = kth_largest_abs(t, k, block_elems)
        self.value = sel.value
        self.ties = k - sel.greater  # elements equal to the threshold still to keep
        self.unseen = sel.equal  # elements equal to the threshold not yet met
        if self.value == 0.0:  # zeros are zeros: keeping them all changes nothing
            self.ties = self.unseen

    def __call__(self, block: Tensor, ws: Workspace, slot: int) -> Tensor:
        mag = torch.abs(block, out=ws.get("mag", block))
        keep = ws.get("keep", block)  # a 0./1. float mask: faster than bool on CPU
        if self.ties == self.unseen:  # every remaining tie is kept
            torch.ge(mag, self.value, out=keep)
        else:
            torch.gt(mag, self.value, out=keep)
            if self.ties:
                keep.add_(self._tie_mask(mag))
        return torch.mul(block, keep, out=ws.get(("t", slot), block))

    def _tie_mask(self, mag: Tensor) -> Tensor:
        """The first ``ties`` threshold-equal elements of this block (in index order)."""
        eq = mag == self.value
        n = int(eq.sum())
        keep = eq if n <= self.ties else eq & (eq.cumsum(0) <= self.ties)
        self.ties, self.unseen = max(0, self.ties - n), self.unseen - n
        return keep


class Drop:
    """DARE: drop with probability p, rescale survivors by 1/(1-p) (if rescale)."""

    def __init__(self, p: float, seed: int, rescale: bool = True):
        self.keep = 1.0 - p
        self.rescale = rescale
        self.gen = torch.Generator(device="cpu").manual_seed(seed)

    def __call__(self, block: Tensor, ws: Workspace, slot: int) -> Tensor:
        probs = ws.get("probs", block, device="cpu").fill_(self.keep)
        mask = torch.bernoulli(probs, generator=self.gen, out=ws.get("draw", block, device="cpu"))
        kept = torch.mul(block, mask.to(block.device), out=ws.get(("t", slot), block))
        return kept.div_(self.keep) if self.rescale else kept


def trimmer(t: Tensor, density: float, block_elems: int = DEFAULT_BLOCK_ELEMS):
    """Block function for a magnitude trim of ``t`` to ``density``."""
    if density >= 1:
        return Identity()
    k = keep_count(density, t.numel())
    return Trim(t, k, block_elems) if k else Zero()


def dropper(p: float, seed: int, rescale: bool = True):
    """Block function for a DARE drop with probability ``p``."""
    if not 0 <= p <= 1:
        raise ValueError(f"drop probability must be in [0, 1], got {p}")
    if p == 0:
        return Identity()
    return Drop(p, seed, rescale) if p < 1 else Zero()


@single_threaded
def magnitude_trim(t: Tensor, density: float, block_elems: int = DEFAULT_BLOCK_ELEMS) -> Tensor:
    """``t`` with all but its ``max(1, int(density * n))`` largest magnitudes zeroed."""
    fn = trimmer(t, density, block_elems)
    return map_blocks(lambda b, ws: fn(b[0], ws, 0), [t], t.dtype, block_elems)


@single_threaded
def dare_drop(
    t: Tensor, p: float, *, seed: int = 0, name: str = "", index: int = 0, rescale: bool = True,
    block_elems: int = DEFAULT_BLOCK_ELEMS,
) -> Tensor:
    """``t`` with each element dropped with probability ``p`` (seeded by seed/name/index)."""
    fn = dropper(p, derive_seed(seed, name, index), rescale)
    return map_blocks(lambda b, ws: fn(b[0], ws, 0), [t], t.dtype, block_elems)
