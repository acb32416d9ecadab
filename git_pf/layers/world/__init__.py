"""The world layer: the agent's sandbox tree, its environment and processes.

``capture`` turns a directory into a git tree plus ``fs.attrs`` records,
``restore`` writes one back, ``env`` reads and redacts environments, ``procs``
records the process table; ``snapshot_input`` writes them into a snapshot,
``diff`` compares two images' worlds and environments, ``check`` is fsck's
check of the tree and its pointers; ``merge`` (with ``merge_attrs``,
``merge_env`` and ``gitmerge``) is the layer's three-way merge. Nothing here writes refs or
commits; ``git_pf.image`` assembles images.
"""

from ... import image as _img
from ..registry import Layer

SUMMARY_FIELDS = ("files", "bytes", "pointers")  # of the manifest's "world" entry, the fs part's
LAYERS = (
    Layer("world", (_img.WORLD_FS, _img.WORLD_ATTRS), "git_pf.layers.world.merge:WorldMerger",
          parsers={_img.WORLD_ATTRS: "git_pf.layers.world.attrs:decode"},
          summary_key="world", summary_fields=SUMMARY_FIELDS, input="git_pf.layers.world.snapshot_input:write_world",
          diff="git_pf.layers.world.diff:diff_world", diff_paths=(_img.WORLD_FS, _img.WORLD_ATTRS), diff_rank=1,
          fsck="git_pf.layers.world.check:problems"),
    Layer("env", (_img.WORLD_ENV, _img.WORLD_PROCS), "git_pf.layers.world.merge_env:EnvMerger",
          parsers={_img.WORLD_ENV: "git_pf.layers.world.env:Env.decode",
                   _img.WORLD_PROCS: "git_pf.layers.world.procs:decode"},
          files=(_img.WORLD_ENV, _img.WORLD_PROCS), summary_key="world", summary_fields=("env_vars", "redacted"),
          input="git_pf.layers.world.snapshot_input:write_env",
          diff="git_pf.layers.world.diff:diff_env", diff_paths=(_img.WORLD_ENV,), diff_rank=4),
)
