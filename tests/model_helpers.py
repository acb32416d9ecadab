"""Shared fixtures of the model-layer tests: real peft LoRA adapters on a tiny, randomly
initialised Llama built from a config (no hub downloads), and small repo helpers."""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
from peft import LoraConfig, PeftModel, get_peft_model  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from git_pf.image.tree import TreeWriter, edit  # noqa: E402
from git_pf.core import config as pf_config
from git_pf.image import manifest as img, refs  # noqa: E402

warnings.filterwarnings("ignore", category=FutureWarning)

TINY = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=4, vocab_size=128)
INPUT_IDS = torch.tensor([[1, 5, 9, 17, 33, 65, 127, 2]])
WEIGHTS = "adapter_model.safetensors"


def tiny_base(seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    return LlamaForCausalLM(LlamaConfig(**TINY)).eval()


def make_adapter(path: Path, seed: int = 1, r: int = 4, alpha: int = 8,
                 targets=("q_proj", "v_proj")) -> Path:
    """A real peft LoRA adapter (random, non-zero A and B) saved at ``path``."""
    model = get_peft_model(tiny_base(), LoraConfig(r=r, lora_alpha=alpha, target_modules=list(targets),
                                                   init_lora_weights=False))
    torch.manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return Path(path)


def train(src: Path, dst: Path, seed: int, only: str | None = None) -> Path:
    """Copy adapter ``src`` to ``dst`` with the tensors whose name contains ``only`` (all
    when None) nudged, as a training step would; other tensors keep their exact bytes."""
    dst.mkdir(parents=True, exist_ok=True)
    (dst / "adapter_config.json").write_bytes((src / "adapter_config.json").read_bytes())
    tensors = load_file(str(src / WEIGHTS))
    gen = torch.Generator().manual_seed(seed)
    for name, t in tensors.items():
        if only is None or only in name:
            tensors[name] = t + torch.randn(t.shape, generator=gen) * 0.05
    save_file(tensors, str(dst / WEIGHTS), metadata={"format": "pt"})
    return dst


def logits(adapter_dir: Path) -> torch.Tensor:
    model = PeftModel.from_pretrained(tiny_base(), str(adapter_dir)).eval()
    with torch.no_grad():
        return model(INPUT_IDS).logits


def sandbox(tmp: Path, name: str = "sb", text: str = "hello\n") -> Path:
    d = tmp / name
    d.mkdir(exist_ok=True)
    (d / "notes.txt").write_text(text)
    return d


def commit_merge(repo, ours: img.ImageInfo, theirs: img.ImageInfo, result, branch: str) -> img.ImageInfo:
    """Write a merge image: ours' tree with a layer result's changes (what the merge engine does)."""
    git = repo.git
    tree = edit(TreeWriter(git), git, bytes.fromhex(ours.tree), result.changes).hex()
    sig = pf_config.signature(git)
    trailers = [("Pf-Merge", result.trailer)] if result.trailer else []
    commit = git.create_commit(None, sig, sig, img.format_message("merge", trailers), tree, [ours.id, theirs.id])
    refs.update_branch(git, branch, str(commit), None, "test merge")
    return img.read_image(git, str(commit))
