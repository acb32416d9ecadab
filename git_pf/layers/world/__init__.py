"""The world layer: the agent's sandbox tree, its environment and processes.

``capture`` turns a directory into a git tree plus ``fs.attrs`` records,
``restore`` writes one back, ``env`` reads and redacts environments, ``procs``
records the process table; ``snapshot_input`` writes them into a snapshot,
``diff`` compares two images' worlds and environments, ``check`` is fsck's
check of the tree and its pointers; ``merge`` (with ``merge_attrs``,
``merge_env`` and ``gitmerge``) is the layer's three-way merge, ``handmerge`` its
resolution by hand. Nothing here writes refs or commits; ``git_pf.image.manifest`` assembles
images. ``WorldLayer`` and ``EnvLayer`` are the two layers' ``Layer`` objects.
"""

from ...image import manifest as _img
from ..base import Layer, naming

SUMMARY_FIELDS = ("files", "bytes", "pointers")  # of the manifest's "world" entry, the fs part's


class WorldLayer(Layer):
    """The sandbox's files: captured first by a snapshot, written into the checkout directory
    itself, merged by git (started before the other layers merge), resolvable by hand."""

    name = "world"
    claims = (_img.WORLD_FS, _img.WORLD_ATTRS)
    parsers = {_img.WORLD_ATTRS: "git_pf.layers.world.attrs:decode"}
    merger = "git_pf.layers.world.merge:WorldMerger"
    summary_key, summary_fields = "world", SUMMARY_FIELDS
    counts = {"world": SUMMARY_FIELDS}
    diff_paths, diff_rank = (_img.WORLD_FS, _img.WORLD_ATTRS), 1
    root = True

    def input(self, snap):
        from .snapshot_input import write_world

        return write_world(snap)

    def source(self, repo, fs_root, ignore):
        from .source import DirWorld

        return DirWorld(repo, fs_root, ignore)

    def checkout_plan(self, git, image):
        from ...image.safepath import validate_image

        with naming(image):
            return validate_image(git, image.tree)

    def holds(self, plan, name: bytes) -> bool:
        return name in plan.kinds

    def checkout(self, repo, image, plan, tmp, out, side, alone):
        import os

        from .restore import restore

        return restore(repo.git, repo.store, plan, os.fsencode(tmp)), []

    def diff(self, git, a, b):
        from .diff import diff_world

        return diff_world(git, a, b)

    def patches(self, git, store, a, b):
        from .diff import patches

        return patches(git, store, a, b)

    def merge_bases(self, git, git_dir, ours, theirs):
        from .gitmerge import merge_bases

        return merge_bases(git, git_dir, ours, theirs)

    def merge_start(self, ctx):
        merger = self.make_merger()
        merger.start(ctx)
        return merger

    def report_line(self, result):
        how = result.report.get("resolution", "")
        if how not in ("merged", "conflict"):
            return None
        n = result.report.get("changed", 0)
        return f"merged by git: {n} path{'' if n == 1 else 's'} differ{'s' if n == 1 else ''} from ours"

    def fsck(self, git, store, image, out, seen, remote_has):
        from .check import problems

        problems(git, store, image, out, seen, remote_has)

    def empty_stats(self):
        from .restore import RestoreStats

        return RestoreStats()

    by_hand = True

    def hand_checkout(self, repo, result, layer_result, dest):
        from .handmerge import checkout

        return checkout(repo, result, layer_result, dest)

    def hand_unresolved(self, dest, state):
        from .handmerge import unresolved

        return unresolved(dest, state)

    def hand_captured(self, repo, dest):
        from .handmerge import captured

        return captured(repo, dest)

    def hand_done(self, dest):
        from .handmerge import done

        done(dest)


class EnvLayer(Layer):
    """The environment (redacted) and the process table, summarised in the manifest's world entry."""

    name = "env"
    claims = files = (_img.WORLD_ENV, _img.WORLD_PROCS)
    parsers = {_img.WORLD_ENV: "git_pf.layers.world.env:Env.decode", _img.WORLD_PROCS: "git_pf.layers.world.procs:decode"}
    merger = "git_pf.layers.world.merge_env:EnvMerger"
    summary_key, summary_fields = "world", ("env_vars", "redacted")
    counts = {"world": ("env_vars", "redacted"), "procs": ("processes",)}
    diff_paths, diff_rank = (_img.WORLD_ENV,), 4
    keywords = ("env", "no_redact")

    def input_from(self, keywords):
        from .snapshot_input import EnvGiven

        return EnvGiven.from_keywords(keywords)

    def input_from_flags(self, flags):
        from .snapshot_input import env_from_flags

        return env_from_flags(flags)

    def input(self, snap):
        from .snapshot_input import write_env

        return write_env(snap)

    def diff(self, git, a, b):
        from .diff import diff_env

        return diff_env(git, a, b)

    def report_line(self, result):
        from ..base import generic_report_line

        procs = result.report.get("procs")
        return f"{generic_report_line(result)}; procs: {procs}" if procs else None

    def merged_summaries(self, git, ours_tree, changes):
        from . import procs

        found = procs.merged_summary(git, changes)
        return {} if found is None else {procs.NAME: found}


LAYERS = (WorldLayer(), EnvLayer())
