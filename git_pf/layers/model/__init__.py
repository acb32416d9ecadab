"""git_pf.layers.model: the model layer of an image (base identity, peft adapter, weight delta).

Capture and restore work on raw safetensors bytes and never import torch;
only the numeric merge (``merge``, ``model_merge``, ``tensors``) imports torch,
lazily, when two sides really changed an adapter. ``ModelLayer`` is the layer's
``Layer`` object. Spec: docs/model.md.
"""

from ..base import Layer, write_own


class ModelLayer(Layer):
    """Base identity, adapter and delta; checked out by its own writer, merged numerically with the extra."""

    name = "model"
    claims = (b"model",)
    merger = "git_pf.layers.model.merge:ModelMerger"
    needs_extra = True
    diff_paths, diff_rank = (b"model",), 5

    def input_from_flags(self, flags):
        """``--adapter``, ``--base-model`` and ``--delta`` (no torch: raw safetensors bytes)."""
        adapter, base, delta = flags.get("adapter"), flags.get("base_model"), flags.get("delta")
        if adapter is None and base is None and delta is None:
            return None
        from .layer import ModelInput

        return ModelInput.prepare(adapter, base, delta)

    def checkout(self, repo, image, plan, tmp, out, side, alone):
        from .checkout import write

        return None, write_own(write, repo, image, tmp, out, side, alone, self.name)

    def checkout_plan(self, git, image):
        return None

    def diff(self, git, a, b):
        from .show import diff

        return diff(git, a, b)

    def summary(self, repo, image):
        from .show import summary

        return summary(repo, image)

    def fsck(self, git, store, image, out, seen, remote_has):
        from .show import problems

        problems(git, store, image, out, seen, remote_has)

    def object_refs(self, git, tree_hex):
        from .state import image_object_ids

        return image_object_ids(git, tree_hex)


LAYERS = (ModelLayer(),)
