"""Numeric merges of stored adapters and deltas (imports torch; only merge paths import this).

``merge_adapters``: peft LoRA adapters merged on ΔW = B·A·scale against a
base adapter (None = zero) by ``git_pf.kernels.merge_lora_adapters``,
refactored to the output rank; the result is stored in the side store as a
new adapter with the first side's config (target modules united, ``r`` as
asked). ``merge_deltas``: full-weight deltas merged tensor by tensor
three-way. Both return what they stored and a report. A merge that cannot
be done (different adapter types, shapes) raises ``MergeRefused`` with one
line. Never writes trees, commits or refs.
"""
from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass

from ... import kernels
from ...store.sidestore import SideStore
from . import store as store_mod, tensors as tensors_mod
from .options import MergeRefused, MergeSpec
from .state import Adapter
from .store import TensorIndex

ADAPTER_METADATA = {"format": "pt"}


@dataclass(frozen=True)
class Outcome:
    stored: object  # Adapter or TensorIndex
    report: dict


def _config(adapter: Adapter, who: str) -> dict:
    cfg = adapter.config_json
    if str(cfg.get("peft_type", "LORA")).upper() != "LORA":
        raise MergeRefused(f"{who}'s adapter is {cfg.get('peft_type')}, only LoRA adapters merge numerically")
    if not isinstance(cfg.get("r"), int) or "lora_alpha" not in cfg:
        raise MergeRefused(f"{who}'s adapter_config.json lacks r or lora_alpha")
    return cfg


def _united_targets(configs: list[dict]) -> object:
    targets = [c.get("target_modules") for c in configs]
    if all(t == targets[0] for t in targets):
        return targets[0]
    if all(isinstance(t, list) for t in targets):
        return sorted({m for t in targets for m in t})
    raise MergeRefused("the adapters target different modules and one names them by a pattern; merge them by hand")


def output_config(sides: list[Adapter], base: Adapter | None, names: list[str], rank: int | None
                  ) -> tuple[dict, int | None]:
    """The merged adapter's config (first side's, targets united) and the rank to refactor to
    (as asked; else the sides' rank, the largest when they differ; None keeps the config's)."""
    everyone = sides + ([base] if base is not None else [])
    configs = [_config(a, n) for a, n in zip(everyone, names + ["the merge base"])]
    for key in ("use_dora", "use_rslora"):
        if len({bool(c.get(key, False)) for c in configs}) > 1:
            raise MergeRefused(f"the adapters disagree on {key}; merge them by hand")
    if any(c.get("use_dora") for c in configs):
        raise MergeRefused("DoRA adapters do not merge as B·A deltas")
    cfg = dict(configs[0], target_modules=_united_targets(configs))
    ranks = {c["r"] for c in configs[: len(sides)]}
    if rank is None and len(ranks) > 1:
        rank = max(ranks)
    return cfg, rank


def _config_bytes(cfg: dict, first: Adapter) -> bytes:
    if cfg == first.config_json:
        return first.config
    return (json.dumps(cfg, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _load(store: SideStore, adapter: Adapter) -> kernels.LoraAdapter:
    return kernels.LoraAdapter(tensors_mod.load(store, adapter.index), adapter.config_json)


def _source_name(src, names: list[str]) -> str:
    return names[src] if isinstance(src, int) else str(src)


def merge_adapters(store: SideStore, sides: list[Adapter], base: Adapter | None, spec: MergeSpec,
                   names: list[str]) -> Outcome:
    """Merge ``sides`` against ``base`` (None: zero) and store the result."""
    spec.check_sides(len(sides))
    cfg, rank = output_config(sides, base, names, spec.rank)
    loaded = [_load(store, a) for a in sides]
    base_loaded = _load(store, base) if base is not None else None
    try:
        result = kernels.merge_lora_adapters(spec.kernel_method, loaded, base_loaded, rank=rank, config=cfg,
                                             **spec.kernel_options())
    except (ValueError, TypeError, RuntimeError) as e:
        raise MergeRefused(f"cannot merge the adapters: {e}") from None
    index = store_mod.store_tensors(store, tensors_mod.items(result.tensors), ADAPTER_METADATA)
    out_cfg = result.config
    report = {**spec.to_json(), "rank": out_cfg.get("r"), "error": result.error,
              "max_module_error": max(result.errors.values(), default=0.0),
              "modules": dict(sorted(Counter(_source_name(s, names) for s in result.sources.values()).items()))}
    return Outcome(Adapter(_config_bytes(out_cfg, sides[0]), index), report)


def merge_deltas(store: SideStore, sides: list[TensorIndex], base: TensorIndex | None, spec: MergeSpec,
                 names: list[str]) -> Outcome:
    """Merge full-weight deltas tensor by tensor against ``base`` (None: zero) and store the result."""
    spec.check_sides(len(sides))
    loaded = [tensors_mod.load(store, s) for s in sides]
    base_loaded = tensors_mod.load(store, base) if base is not None else {}
    opts = kernels.MergeOptions(method=spec.kernel_method, **spec.kernel_options())
    out, sources = {}, Counter()
    for name in dict.fromkeys(n for d in [*loaded, base_loaded] for n in d):
        try:
            src, value = kernels.three_way([d.get(name) for d in loaded], base_loaded.get(name), opts, name)
        except (ValueError, TypeError, RuntimeError) as e:
            raise MergeRefused(f"cannot merge delta tensor '{name}': {e}") from None
        sources[_source_name(src, names) if value is not None else "deleted"] += 1
        if value is not None:
            out[name] = value
    metadata = sides[0].metadata
    index = store_mod.store_tensors(store, tensors_mod.items(out), metadata)
    return Outcome(index, {**spec.to_json(), "tensors": dict(sorted(sources.items()))})
