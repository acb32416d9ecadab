"""git_pf.layers.model: the model layer of an image (base identity, peft adapter, weight delta).

Capture and restore work on raw safetensors bytes and never import torch;
only the numeric merge (``merge``, ``model_merge``, ``tensors``) imports torch,
lazily, when two sides really changed an adapter. Spec: docs/model.md.
"""
