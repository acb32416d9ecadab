"""git_pf.kernels on CUDA: the same torch code must give the CPU's results."""

from __future__ import annotations

import pytest
import torch

from git_pf.kernels import MergeOptions, kth_largest_abs, lora_delta, merge_tensors, refactor

pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="CPU/CUDA parity needs a CUDA device; torch.cuda.is_available() is False"
)

OPTIONS = [
    MergeOptions("linear", weights=[0.5, 0.3, 0.2]),
    MergeOptions("task_arithmetic", weights=[1.0, 0.7, -0.4], lam=0.8),
    MergeOptions("ties", weights=[1.0, 0.7, -0.4], density=0.3),
    MergeOptions("ties", weights=[1.0, 0.7, -0.4], density=0.3, elect="weighted", normalize="weight"),
    MergeOptions("dare_linear", weights=[1.0, 0.7, -0.4], drop=0.5, seed=4),
    MergeOptions("dare_ties", weights=[1.0, 0.7, -0.4], drop=0.5, seed=4),
]


def inputs(shape=(300, 257)):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(*shape, generator=g) for _ in range(3)]


@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: f"{o.method}-{o.elect}")
def test_merge_cpu_cuda_parity(opts):
    ts = inputs()
    small = MergeOptions(**{**opts.__dict__, "block_elems": 4096})  # many blocks, tie / RNG state carried
    cpu = merge_tensors(ts, small, name="layer.weight")
    gpu = merge_tensors([t.cuda() for t in ts], small, name="layer.weight")
    assert gpu.device.type == "cuda"
    assert float((gpu.cpu() - cpu).abs().max()) <= 1e-6
    assert torch.equal(gpu.cpu() != 0, cpu != 0)  # same trim / drop masks, same elected entries


def test_selection_cpu_cuda_parity():
    t = inputs()[0]
    for k in (1, 100, 77_100):
        assert kth_largest_abs(t, k) == kth_largest_abs(t.cuda(), k)


def test_refactor_cpu_cuda_parity():
    g = torch.Generator().manual_seed(1)
    delta = torch.randn(200, 8, generator=g) @ torch.randn(8, 150, generator=g)
    delta += 0.01 * torch.randn(200, 150, generator=g)
    cpu, gpu = refactor(delta, 8, 2.0, seed=3), refactor(delta.cuda(), 8, 2.0, seed=3)
    assert gpu.error == pytest.approx(cpu.error, rel=1e-3)
    assert torch.allclose(lora_delta(gpu.A, gpu.B, 2.0).cpu(), lora_delta(cpu.A, cpu.B, 2.0), atol=1e-4)
    assert torch.allclose(gpu.A.cpu(), cpu.A, atol=1e-3)  # canonical signs: factors agree too
