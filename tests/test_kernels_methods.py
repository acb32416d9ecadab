"""git_pf.kernels merge methods: parity with peft and mergekit, determinism, blocks."""

from __future__ import annotations

import itertools
from contextlib import contextmanager

import pytest
import torch

from git_pf.kernels import MergeOptions, derive_seed, merge_deltas, merge_tensors

SHAPES = [(64, 48), (257,), (6, 10, 7)]
WEIGHTS = [1.0, 0.7, -0.4]
TOL = 1e-6


def randn(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def task_vectors(shape, n=3, seed=0):
    return [randn(*shape, seed=seed + i) for i in range(n)]


def maxdiff(a, b):
    return float((a.double() - b.double()).abs().max())


@contextmanager
def seeded_calls(module, attr, name, n):
    """Reseed the global RNG with our per-tensor DARE seeds before each call of module.attr.

    peft and mergekit draw DARE masks with torch.bernoulli on the global RNG, one
    call per task vector in order; seeding each call with derive_seed(0, name, i)
    makes them draw exactly the mask our generator draws, from their own code.
    """
    original = getattr(module, attr)
    seeds = iter([derive_seed(0, name, i) for i in range(n)])

    def wrapper(*args, **kwargs):
        torch.manual_seed(next(seeds))
        return original(*args, **kwargs)

    setattr(module, attr, wrapper)
    try:
        yield
    finally:
        setattr(module, attr, original)


# --- peft ---------------------------------------------------------------------------------

peft_merge = pytest.importorskip("peft.utils.merge_utils")


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density", [0.1, 0.3, 0.8])
def test_ties_matches_peft(shape, density):
    ts = task_vectors(shape)
    ref = peft_merge.ties(ts, torch.tensor(WEIGHTS), density)
    ours = merge_tensors(ts, MergeOptions("ties", weights=WEIGHTS, density=density))
    assert maxdiff(ours, ref) <= TOL


@pytest.mark.parametrize("shape", SHAPES)
def test_task_arithmetic_matches_peft(shape):
    ts = task_vectors(shape)
    ref = peft_merge.task_arithmetic(ts, torch.tensor(WEIGHTS))
    assert maxdiff(merge_tensors(ts, MergeOptions("task_arithmetic", weights=WEIGHTS)), ref) <= TOL


@pytest.mark.parametrize("method", ["dare_linear", "dare_ties"])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("drop", [0.1, 0.5, 0.9])
def test_dare_matches_peft_with_same_mask(method, shape, drop):
    ts = task_vectors(shape)
    with seeded_calls(peft_merge, "prune", "w", len(ts)):
        ref = getattr(peft_merge, method)(ts, torch.tensor(WEIGHTS), 1.0 - drop)
    ours = merge_tensors(ts, MergeOptions(method, weights=WEIGHTS, drop=drop), name="w")
    assert maxdiff(ours, ref) <= TOL


# --- mergekit -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mergekit():
    pytest.importorskip("mergekit")
    from mergekit.merge_methods import generalized_task_arithmetic, registry
    from mergekit.merge_methods.base import TensorGroup

    def run(method, ts, with_base=True, **params):
        tensors = [torch.zeros_like(ts[0])] + ts if with_base else ts
        group = TensorGroup.from_tensors(tensors, base_index=0 if with_base else None)
        return registry.get(method)([group], parameters=params)[0]

    run.gta = generalized_task_arithmetic
    return run


MK_TIES = dict(elect="weighted", normalize="weight")  # mergekit's TIES conventions


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("density,lam", [(0.2, 1.0), (0.5, 0.8)])
def test_ties_matches_mergekit(mergekit, shape, density, lam):
    ts = task_vectors(shape)
    ref = mergekit("ties", ts, weight=WEIGHTS, density=density, **{"lambda": lam})
    ours = merge_tensors(ts, MergeOptions("ties", weights=WEIGHTS, density=density, lam=lam, **MK_TIES))
    assert maxdiff(ours, ref) <= TOL


def test_ties_unnormalized_matches_mergekit(mergekit):
    ts = task_vectors((64, 48))
    ref = mergekit("ties", ts, weight=WEIGHTS, density=0.3, normalize=False)
    ours = merge_tensors(ts, MergeOptions("ties", weights=WEIGHTS, density=0.3, elect="weighted", normalize="none"))
    assert maxdiff(ours, ref) <= TOL


@pytest.mark.parametrize("method", ["dare_linear", "dare_ties"])
@pytest.mark.parametrize("shape", SHAPES)
def test_dare_matches_mergekit_with_same_mask(mergekit, method, shape):
    # mergekit rescales DARE survivors by an L1-norm ratio (rescale=True); ours by
    # 1/(1-p). The masks, election and sums are compared with rescaling off.
    ts = task_vectors(shape)
    with seeded_calls(mergekit.gta, "sparsify", "w", len(ts)):
        ref = mergekit(method, ts, weight=WEIGHTS, density=0.6, rescale=False)
    opts = MergeOptions(method, weights=WEIGHTS, drop=0.4, rescale=False, elect="weighted", normalize="none")
    assert maxdiff(merge_tensors(ts, opts, name="w"), ref) <= TOL


def test_task_arithmetic_and_linear_match_mergekit(mergekit):
    ts = task_vectors((64, 48))
    ref = mergekit("task_arithmetic", ts, weight=WEIGHTS, **{"lambda": 0.5})
    assert maxdiff(merge_tensors(ts, MergeOptions("task_arithmetic", weights=WEIGHTS, lam=0.5)), ref) <= TOL
    ref = mergekit("linear", ts, with_base=False, weight=[1.0, 0.7, 0.4])
    assert maxdiff(merge_tensors(ts, MergeOptions("linear", weights=[1.0, 0.7, 0.4])), ref) <= TOL


# --- properties ---------------------------------------------------------------------------

ALL = [
    MergeOptions("linear"),
    MergeOptions("task_arithmetic", weights=WEIGHTS, lam=0.7),
    MergeOptions("ties", weights=WEIGHTS, density=0.3),
    MergeOptions("ties", weights=WEIGHTS, density=0.3, **MK_TIES),
    MergeOptions("dare", weights=WEIGHTS, drop=0.5, seed=3),
    MergeOptions("dare_ties", weights=WEIGHTS, drop=0.5, seed=3),
]


@pytest.mark.parametrize("opts", ALL, ids=lambda o: o.method)
def test_deterministic_and_block_size_independent(opts):
    ts = task_vectors((50, 33))
    first = merge_tensors(ts, opts, name="x")
    assert torch.equal(first, merge_tensors(ts, opts, name="x"))
    for block in (1, 7, 33, 1000):
        small = MergeOptions(**{**opts.__dict__, "block_elems": block})
        assert torch.equal(first, merge_tensors(ts, small, name="x")), block


@pytest.mark.parametrize("opts", ALL, ids=lambda o: o.method)
def test_non_contiguous_and_low_precision_inputs(opts):
    ts = task_vectors((40, 30))
    dense = merge_tensors([t.T.contiguous() for t in ts], opts, name="x")
    assert torch.equal(dense, merge_tensors([t.T for t in ts], opts, name="x"))
    half = [t.to(torch.bfloat16) for t in ts]
    out = merge_tensors(half, opts, name="x")
    assert out.dtype == torch.bfloat16
    assert torch.equal(out, merge_tensors([t.float() for t in half], opts, name="x").to(torch.bfloat16))


def test_dare_seed_and_name_select_the_mask():
    ts = task_vectors((30, 30))
    run = lambda seed, name: merge_tensors(ts, MergeOptions("dare", drop=0.5, seed=seed), name=name)  # noqa: E731
    assert torch.equal(run(1, "a"), run(1, "a"))
    assert not torch.equal(run(1, "a"), run(2, "a"))
    assert not torch.equal(run(1, "a"), run(1, "b"))


def test_degenerate_settings():
    ts = task_vectors((20, 20))
    total = ts[0] + ts[1] + ts[2]
    assert torch.equal(merge_tensors(ts, MergeOptions("dare", drop=0.0)), total)
    assert not merge_tensors(ts, MergeOptions("dare", drop=1.0)).any()
    assert not merge_tensors(ts, MergeOptions("ties", density=0.0)).any()
    lone = merge_tensors(ts[:1], MergeOptions("ties", density=1.0))
    assert torch.equal(lone, ts[0])
    with pytest.raises(ValueError):
        MergeOptions("slerp")
    with pytest.raises(ValueError):
        merge_tensors([ts[0], ts[1][:10]], MergeOptions("linear"))


@pytest.mark.parametrize("opts", ALL, ids=lambda o: o.method)
def test_missing_names_count_as_zero(opts):
    a = {"x": randn(8, 8, seed=1), "y": randn(5, seed=2)}
    b = {"y": randn(5, seed=3), "z": randn(3, 3, seed=4)}
    c = {"x": randn(8, 8, seed=5)}
    opts2 = {k: v for k, v in opts.__dict__.items() if k != "method"}
    merged = merge_deltas(opts.method, [a, b, c], **opts2)
    assert list(merged) == ["x", "y", "z"]
    for name, out in merged.items():
        full = [d.get(name, torch.zeros_like(merged[name])) for d in (a, b, c)]
        assert torch.equal(out, merge_tensors(full, opts, name=name)), name


def test_linear_merge_of_a_delta_with_itself_returns_it():
    t = randn(33, 17)
    assert torch.equal(merge_tensors([t, t], MergeOptions("linear")), t)
    assert torch.equal(merge_tensors([t, t], MergeOptions("ties", density=1.0)), t)
    assert maxdiff(merge_tensors([t, t, t], MergeOptions("linear", weights=[0.2, 0.3, 0.5])), t) <= TOL


def test_three_way_with_one_side_unchanged_is_that_side():
    change = randn(33, 17)
    zero = torch.zeros_like(change)
    for opts in (MergeOptions("task_arithmetic"), MergeOptions("ties", density=1.0), MergeOptions("dare_ties")):
        assert torch.equal(merge_tensors([change, zero], opts), change), opts.method
        assert torch.equal(merge_tensors([zero, change], opts), change), opts.method


def test_all_method_option_combinations_run():
    ts = task_vectors((9, 4))
    for method, elect, norm in itertools.product(["linear", "ties", "dare_ties"], ["raw", "weighted"],
                                                 ["count", "weight", "none"]):
        out = merge_tensors(ts, MergeOptions(method, weights=WEIGHTS, drop=0.3, density=0.5,
                                             elect=elect, normalize=norm))
        assert out.shape == (9, 4) and torch.isfinite(out).all()


def test_options_are_validated_and_threads_restored():
    for bad in (dict(density=1.5), dict(drop=-0.1), dict(elect="max"), dict(normalize="mean")):
        with pytest.raises(ValueError):
            MergeOptions("ties", **bad)
    with pytest.raises(ValueError):
        merge_tensors(task_vectors((4,)), MergeOptions("linear", weights=[1.0]))
    before = torch.get_num_threads()
    merge_tensors(task_vectors((64, 64)), MergeOptions("ties", density=0.5))
    assert torch.get_num_threads() == before
