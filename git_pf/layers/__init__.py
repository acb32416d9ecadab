"""The layers of an image, one package each: world, trace, effects, model, cache.

Each package holds everything about its layer: its formats, capture or input,
readers, checkout writer, diff and summary pieces, and its three-way merge.
A layer package may import ``core``, ``store``, ``image`` and the kernels,
and its own modules; never another layer's package except where a rule spans
layers (the cache merge reads the merged trace), never the transport, the
merge engine, the mount or the CLI (docs/architecture.md).
"""
