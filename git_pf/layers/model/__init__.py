"""git_pf.layers.model: the model layer of an image (base identity, peft adapter, weight delta).

Capture and restore work on raw safetensors bytes and never import torch;
only the numeric merge (``merge``, ``model_merge``, ``tensors``) imports torch,
lazily, when two sides really changed an adapter. Spec: docs/model.md.
"""

from ..registry import Layer

LAYERS = (Layer("model", (b"model",), "git_pf.layers.model.merge:ModelMerger",
                writer="git_pf.layers.model.checkout:write",
                object_refs="git_pf.layers.model.state:image_object_ids", needs_extra=True),)
