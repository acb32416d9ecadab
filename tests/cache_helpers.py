"""Shared fixtures of the KV-cache tests: a tiny seeded Llama and greedy decoding."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

VOCAB = 256


@pytest.fixture(autouse=True)
def deterministic_torch():
    """Deterministic algorithms and one thread for the test, then the process's settings back.

    Test modules import this name, which makes it apply to each of their tests."""
    det, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    yield
    torch.use_deterministic_algorithms(det)
    torch.set_num_threads(threads)


def tiny_llama(layers: int = 2, seed: int = 0):
    """A randomly initialised fp32 Llama (hidden 64, 4 heads, 2 KV heads), deterministic."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=layers, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=1024)
    return LlamaForCausalLM(cfg).eval()


def prompt(n: int, seed: int = 1) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, VOCAB, (n,), generator=g).tolist()


@torch.no_grad()
def feed(model, cache, tokens: list[int]) -> torch.Tensor:
    """Run ``tokens`` through the model on ``cache``; the logits of the last position."""
    out = model(torch.tensor([tokens]), past_key_values=cache, use_cache=True)
    return out.logits[0, -1].clone()


@torch.no_grad()
def decode(model, cache, first: int, steps: int) -> tuple[list[int], list[torch.Tensor]]:
    """Greedy decoding: feed ``first``, then each argmax; returns the fed tokens and every logit vector."""
    tokens, logits, nxt = [], [], first
    for _ in range(steps):
        tokens.append(nxt)
        logit = feed(model, cache, [nxt])
        logits.append(logit)
        nxt = int(logit.argmax())
    return tokens, logits
