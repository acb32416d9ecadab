"""Memory-bounded iteration: walk same-shaped tensors block by block.

Job: cut N same-shaped tensors into aligned blocks of at most
``block_elems`` elements (row blocks along dim 0, or flat chunks when every
input is contiguous), hand each block to a function in the working dtype and
write its result into one preallocated output. Extra memory is therefore a
few blocks, whatever the tensor size. Entry points run single-threaded (see
``single_threaded``). Blocks are visited in row-major order,
which the stateful sparsifiers (tie quota, DARE generator) rely on.

Scratch memory comes from a ``Workspace``: named buffers allocated on the
first block and reused for every later one. Allocating and freeing a few MiB
per block makes the C allocator return pages to the OS and fault them back
in, which costs more than the arithmetic (and, in VMs with free-page
reporting, occasionally seconds).

May not touch: pygit2, anything in git_pf outside kernels; inputs are never
modified in place.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Optional

import torch
from torch import Tensor

#: default block size in elements (1 MiB of fp32 per input block).
DEFAULT_BLOCK_ELEMS = 1 << 18


class Workspace:
    """Named scratch buffers, reused across blocks; ``get`` returns a flat view."""

    def __init__(self) -> None:
        self._bufs: dict[Hashable, Tensor] = {}

    def get(self, key: Hashable, like: Tensor, dtype: Optional[torch.dtype] = None,
            device: Optional[torch.device] = None) -> Tensor:
        """A buffer with ``like.numel()`` elements (``like``'s dtype/device unless given)."""
        n, dtype, device = like.numel(), dtype or like.dtype, torch.device(device or like.device)
        buf = self._bufs.get(key)
        if buf is None or buf.numel() < n or buf.dtype != dtype or buf.device != device:
            buf = self._bufs[key] = torch.empty(n, dtype=dtype, device=device)
        return buf[:n]


def single_threaded(fn: Callable) -> Callable:
    """Run ``fn`` with one torch intra-op thread, restoring the setting after.

    A block loop issues tens of small ops per block; with several intra-op
    threads each op is a parallel region, and on a loaded machine every region
    waits for a descheduled thread (measured: the benchmark's TIES took 93 s
    with 2 threads under CPU contention, 5.6 s with 1). The loops are
    memory-bound, so one thread costs ~15% on an idle machine. This is a
    process-wide torch setting: do not run merges concurrently with other
    torch work in the same process if that matters.
    """

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        threads = torch.get_num_threads()
        if threads == 1:
            return fn(*args, **kwargs)
        torch.set_num_threads(1)
        try:
            return fn(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return wrapper


def work_dtype(tensors: Sequence[Tensor]) -> torch.dtype:
    """Compute dtype for a merge: float64 if any input is, else float32."""
    return torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32


def _row_views(tensors: Sequence[Tensor]) -> list[Tensor]:
    """Views whose dim 0 is the blocking axis (flat when all are contiguous)."""
    if all(t.is_contiguous() for t in tensors):
        return [t.reshape(-1) for t in tensors]
    return [t.reshape(1) if t.dim() == 0 else t for t in tensors]


def block_slices(rows: int, row_elems: int, block_elems: int) -> Iterator[slice]:
    """Consecutive dim-0 slices holding at most ``block_elems`` elements (>= 1 row)."""
    step = max(1, block_elems // max(1, row_elems))
    for start in range(0, rows, step):
        yield slice(start, min(rows, start + step))


def _flat(part: Tensor, dtype: torch.dtype, ws: Workspace, key: Hashable) -> Tensor:
    """``part`` flattened in ``dtype``: a view when possible, else a workspace copy."""
    if part.is_contiguous() and part.dtype == dtype:
        return part.view(-1)
    return ws.get(key, part, dtype).view(part.shape).copy_(part).view(-1)


def iter_blocks(
    tensors: Sequence[Tensor], dtype: torch.dtype, block_elems: int = DEFAULT_BLOCK_ELEMS,
    ws: Optional[Workspace] = None,
) -> Iterator[tuple[slice, list[Tensor]]]:
    """Yield ``(rows, [flat block of each tensor in dtype])`` in row-major order.

    Blocks may be workspace views: they are valid until the next iteration.
    """
    ws = ws or Workspace()
    views = _row_views(tensors)
    head = views[0]
    row_elems = head[0].numel() if head.dim() > 1 and head.shape[0] else 1
    for sl in block_slices(head.shape[0], row_elems, block_elems):
        yield sl, [_flat(v[sl], dtype, ws, ("in", i)) for i, v in enumerate(views)]


def map_blocks(
    fn: Callable[[list[Tensor], Workspace], Tensor],
    tensors: Sequence[Tensor],
    out_dtype: torch.dtype,
    block_elems: int = DEFAULT_BLOCK_ELEMS,
) -> Tensor:
    """Apply ``fn(blocks, workspace)`` to aligned blocks of ``tensors``; return the assembled output."""
    head, ws = tensors[0], Workspace()
    out = torch.empty(head.shape, dtype=out_dtype, device=head.device)
    out_rows = _row_views([out] + list(tensors))[0]
    for sl, blocks in iter_blocks(tensors, work_dtype(tensors), block_elems, ws):
        out_rows[sl].view(-1).copy_(fn(blocks, ws))
    return out
