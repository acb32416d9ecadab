"""git_pf.kernels: numeric merge kernels for model deltas (pure torch).

Job: TIES / DARE / DARE-TIES / linear / task-arithmetic merges of task
vectors, tensor by tensor and block by block (bounded extra memory), seeded
and bitwise reproducible; LoRA ΔW = B·A·scale and its refactorisation back
to rank r; the N-way / three-way merge of peft adapters built on both.
Runs wherever its tensors live (CPU, or CUDA with the same code).

May not touch: pygit2, the rest of git_pf (this package is imported by it,
never the other way round), files, the global torch RNG. Inside kernels/
only relative imports are used (it installs as git_pf.kernels).
"""

from .adapters import (
    PAIRS,
    LoraAdapter,
    LoraMerge,
    Module,
    lora_modules,
    merge_lora_adapters,
    module_delta,
    module_rank,
    module_scale,
    three_way,
)
from .blocks import DEFAULT_BLOCK_ELEMS, Workspace, iter_blocks, map_blocks, single_threaded
from .consensus import disjoint_merge, elected_sign, scaled, ties_combine
from .lora import Factors, lora_delta, lora_scale, refactor, truncated_svd
from .methods import METHODS, MergeOptions, merge_deltas, merge_tensors, weighted_sum
from .select import Selection, kth_largest_abs
from .sparsify import dare_drop, derive_seed, keep_count, magnitude_trim

__all__ = [
    "DEFAULT_BLOCK_ELEMS",
    "METHODS",
    "PAIRS",
    "Factors",
    "LoraAdapter",
    "LoraMerge",
    "MergeOptions",
    "Module",
    "Selection",
    "Workspace",
    "dare_drop",
    "derive_seed",
    "disjoint_merge",
    "elected_sign",
    "iter_blocks",
    "keep_count",
    "kth_largest_abs",
    "lora_delta",
    "lora_modules",
    "lora_scale",
    "magnitude_trim",
    "map_blocks",
    "merge_deltas",
    "merge_lora_adapters",
    "merge_tensors",
    "module_delta",
    "module_rank",
    "module_scale",
    "refactor",
    "scaled",
    "single_threaded",
    "three_way",
    "ties_combine",
    "truncated_svd",
    "weighted_sum",
]
