"""peft LoRA adapters: key naming, per-module ΔW, and N-way / three-way merges.

Job: take peft ``adapter_model.safetensors`` state dicts (keys such as
``base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`` /
``...lora_B.weight``, ``...embed_tokens.lora_embedding_A`` / ``_B``) plus their
``adapter_config.json`` dicts, and merge them module by module:

1. ΔW_i = B_i A_i * scale_i for every side, ΔW_b for the base adapter
   (``base=None`` or a missing module is zero; so is a module missing on a side);
2. task vectors τ_i = ΔW_i - ΔW_b, merged by methods.py (TIES / DARE / ...);
3. result = ΔW_b + merge(τ), refactored to the output rank by lora.py.

With ``resolve_trivial`` (default) the VCS rule comes first, per module: if
no side changed it, the base is kept; if every side that changed it made the
same change, that side is taken as is (its exact A/B when its rank and
scale match the output's). Non-LoRA tensors (``modules_to_save``, a targeted
embedding's ``base_layer.weight``, biases) go through the same three-way rule
on their raw values. Output keys are the input keys, byte for byte.

May not touch: pygit2, anything in git_pf outside kernels, files (callers read
and write safetensors / json); inputs are never modified in place.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union

import torch
from torch import Tensor

from .lora import Factors, lora_delta, lora_scale, refactor
from .methods import MergeOptions, merge_tensors
from .sparsify import derive_seed

#: (A suffix, B suffix) of the peft LoRA key pairs we understand.
PAIRS = ((".lora_A.weight", ".lora_B.weight"), (".lora_embedding_A", ".lora_embedding_B"))
_PEFT_PREFIX = "base_model.model."
Source = Union[str, int]  # "base", "merged", "deleted", or the index of the side taken as is


@dataclass(frozen=True)
class LoraAdapter:
    """One peft adapter: its safetensors state dict and its adapter_config.json dict."""

    tensors: Mapping[str, Tensor]
    config: Mapping[str, Any]


@dataclass(frozen=True)
class Module:
    """A LoRA module's factors, keyed in the state dict by ``prefix + suffix``."""

    prefix: str
    pair: tuple[str, str]
    A: Tensor
    B: Tensor

    @property
    def keys(self) -> tuple[str, str]:
        return self.prefix + self.pair[0], self.prefix + self.pair[1]

    @property
    def rank(self) -> int:
        return self.A.shape[0]


@dataclass
class LoraMerge:
    """A merged adapter: state dict, config to save with it, and how good it is."""

    tensors: dict[str, Tensor]
    config: dict[str, Any]
    errors: dict[str, float] = field(default_factory=dict)  # per module prefix
    sources: dict[str, Source] = field(default_factory=dict)  # per module prefix / other key
    error: float = 0.0  # sqrt(sum residual^2) / sqrt(sum ||ΔW||^2) over modules


def lora_modules(tensors: Mapping[str, Tensor]) -> dict[str, Module]:
    """The LoRA modules of a peft state dict, by key prefix, in key order."""
    modules = {}
    for key in tensors:
        for a_suf, b_suf in PAIRS:
            if key.endswith(a_suf):
                prefix = key[: -len(a_suf)]
                if prefix + b_suf not in tensors:
                    raise ValueError(f"{key} has no matching {prefix + b_suf}")
                modules[prefix] = Module(prefix, (a_suf, b_suf), tensors[key], tensors[prefix + b_suf])
    return modules


def _pattern_value(patterns: Mapping[str, Any], prefix: str, default: Any) -> Any:
    """peft's rank_pattern / alpha_pattern lookup (``(.*\\.)?(key)$`` on the module name)."""
    name = prefix[len(_PEFT_PREFIX):] if prefix.startswith(_PEFT_PREFIX) else prefix
    for key in patterns or {}:
        if re.match(rf"(.*\.)?({key})$", name):
            return patterns[key]
    return default


def module_rank(config: Mapping[str, Any], prefix: str) -> int:
    return int(_pattern_value(config.get("rank_pattern"), prefix, config["r"]))


def module_scale(config: Mapping[str, Any], prefix: str, rank: Optional[int] = None) -> float:
    """peft's scaling for the module at ``prefix`` (rank from the config unless given)."""
    alpha = _pattern_value(config.get("alpha_pattern"), prefix, config["lora_alpha"])
    r = module_rank(config, prefix) if rank is None else rank
    return lora_scale(r, alpha, bool(config.get("use_rslora", False)))


def module_delta(module: Module, config: Mapping[str, Any]) -> Tensor:
    """ΔW of one module as a 2-D matrix (out x in·k·k for convolutions)."""
    scale = module_scale(config, module.prefix, module.rank)
    return lora_delta(module.A.reshape(module.rank, -1), module.B.reshape(module.B.shape[0], -1), scale)


@dataclass(frozen=True)
class _Side:
    """An adapter split into LoRA modules and other tensors."""

    adapter: LoraAdapter
    modules: dict[str, Module]

    @classmethod
    def of(cls, adapter: LoraAdapter) -> "_Side":
        return cls(adapter, lora_modules(adapter.tensors))

    def delta(self, prefix: str) -> Optional[Tensor]:
        m = self.modules.get(prefix)
        return None if m is None else module_delta(m, self.adapter.config)

    def other(self, key: str) -> Optional[Tensor]:
        return self.adapter.tensors.get(key)


def _trivial_source(taus: Sequence[Tensor]) -> Source:
    """VCS rule: "base" if nothing changed, i if all changes equal side i's, else "merged"."""
    changed = [i for i, t in enumerate(taus) if bool(t.any())]
    if not changed:
        return "base"
    first = taus[changed[0]]
    return changed[0] if all(torch.equal(taus[i], first) for i in changed[1:]) else "merged"


def three_way(
    values: Sequence[Optional[Tensor]], base: Optional[Tensor], opts: MergeOptions, name: str = "",
    resolve_trivial: bool = True,
) -> tuple[Source, Optional[Tensor]]:
    """Merge ``values`` against ``base`` (None = zero); returns (source, result).

    The result is None when the side taken as is lacks the value (it deleted it).
    """
    ref = next(v for v in (*values, base) if v is not None)
    zero = torch.zeros_like(ref)
    b = zero if base is None else base
    taus = [(zero if v is None else v) - b for v in values]
    src = _trivial_source(taus) if resolve_trivial else "merged"
    if src == "base":
        return src, b
    if src != "merged":
        return src, values[src]
    return src, b + merge_tensors(taus, opts, name).to(b.dtype)


def _reusable(side: Optional[_Side], prefix: str, rank: int, scale: float) -> Optional[Module]:
    """The side's own module when it can be written out unchanged."""
    m = side.modules.get(prefix) if side is not None else None
    if m is not None and m.rank == rank and module_scale(side.adapter.config, prefix, rank) == scale:
        return m
    return None


def _shaped(f: Factors, tmpl: Module, rank: int) -> tuple[Tensor, Tensor]:
    """Refactored 2-D factors in the template module's layout and dtype."""
    A = f.A.reshape(rank, *tmpl.A.shape[1:]).to(tmpl.A.dtype)
    B = f.B.reshape(tmpl.B.shape[0], rank, *tmpl.B.shape[2:]).to(tmpl.B.dtype)
    return A.contiguous(), B.contiguous()


@dataclass(frozen=True)
class _Job:
    """One adapter merge: the sides, the base, and how to merge."""

    sides: list[_Side]
    base: Optional[_Side]
    opts: MergeOptions
    resolve_trivial: bool
    config: dict[str, Any]

    @property
    def everyone(self) -> list[_Side]:
        return [*self.sides, *([self.base] if self.base else [])]

    def other(self, key: str) -> tuple[Source, Optional[Tensor]]:
        """Three-way merge of a non-LoRA tensor."""
        base = self.base.other(key) if self.base else None
        return three_way([s.other(key) for s in self.sides], base, self.opts, key, self.resolve_trivial)

    def module(self, prefix: str) -> Optional[tuple[Source, Tensor, Tensor, Factors]]:
        """(source, A, B, error record) for the LoRA module at ``prefix``; None if deleted."""
        base = self.base.delta(prefix) if self.base else None
        src, delta = three_way([s.delta(prefix) for s in self.sides], base, self.opts, prefix, self.resolve_trivial)
        if delta is None:
            return None
        rank, scale = module_rank(self.config, prefix), module_scale(self.config, prefix)
        holder = self.base if src == "base" else None if src == "merged" else self.sides[src]
        kept = _reusable(holder, prefix, rank, scale)
        if kept is not None:
            return src, kept.A, kept.B, Factors(kept.A, kept.B, 0.0, float(torch.linalg.matrix_norm(delta)), 0.0)
        f = refactor(delta, rank, scale, derive_seed(self.opts.seed, prefix, -1))
        tmpl = next(s.modules[prefix] for s in self.everyone if prefix in s.modules)
        return (src, *_shaped(f, tmpl, rank), f)


def _output_config(adapters: Sequence[LoraAdapter], config, rank) -> dict[str, Any]:
    cfg = dict(config if config is not None else adapters[0].config)
    if rank is not None:
        cfg.update(r=int(rank), rank_pattern={})
    return cfg


def _overall_error(records: Sequence[Factors]) -> float:
    norm2 = sum(f.norm**2 for f in records)
    return math.sqrt(sum(f.residual**2 for f in records) / norm2) if norm2 else 0.0


def _emit(out: LoraMerge, job: _Job, key: str, owner: Mapping[str, Module]) -> Optional[Factors]:
    """Merge what ``key`` belongs to into ``out`` (once per module); its error record if a module."""
    module = owner.get(key)
    if module is None:
        src, value = job.other(key)
        out.sources[key] = "deleted" if value is None else src
        if value is not None:
            out.tensors[key] = value
        return None
    if module.prefix in out.sources:
        return None
    merged = job.module(module.prefix)
    out.sources[module.prefix] = "deleted" if merged is None else merged[0]
    if merged is None:
        return None
    (a_key, b_key), (_, A, B, record) = module.keys, merged
    out.tensors[a_key], out.tensors[b_key], out.errors[module.prefix] = A, B, record.error
    return record


def merge_lora_adapters(
    method: str,
    adapters: Sequence[LoraAdapter],
    base: Optional[LoraAdapter] = None,
    *,
    rank: Optional[int] = None,
    config: Optional[Mapping[str, Any]] = None,
    resolve_trivial: bool = True,
    **options,
) -> LoraMerge:
    """Merge peft LoRA adapters (three-way against ``base``, or N-way if None).

    ``config`` is the output adapter_config (default: the first adapter's);
    ``rank`` overrides its ``r`` (and clears ``rank_pattern``). ``options`` are
    MergeOptions fields (weights, density, drop, lam, seed, ...).
    """
    if any(a.config.get("use_dora") for a in (*adapters, *([base] if base else []))):
        raise ValueError("DoRA adapters cannot be merged as ΔW = B·A·scale (use_dora is set)")
    job = _Job([_Side.of(a) for a in adapters], _Side.of(base) if base is not None else None,
               MergeOptions(method=method, **options), resolve_trivial, _output_config(adapters, config, rank))
    owner = {k: m for s in job.everyone for m in s.modules.values() for k in m.keys}
    out = LoraMerge(tensors={}, config=job.config)
    records = [_emit(out, job, key, owner) for key in dict.fromkeys(k for s in job.everyone for k in s.adapter.tensors)]
    out.error = _overall_error([r for r in records if r is not None])
    return out
