"""Three-way merge of images, layer by layer, from git's merge base.

``layer`` fixes the interface every layer merger implements; the engine and
the world / env / trace / effects mergers live beside it (docs/merge.md).
"""
