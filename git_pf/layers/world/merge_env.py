"""The env layer merger: ``world/env.json`` key-wise, ``world/procs.json`` by side.

``cwd`` and every variable are keys merged three-way; a key both sides
changed differently is a conflict. A variable's redaction follows the value
that wins. The process table cannot be merged: a side that changed it alone
wins, and when both changed it ours is kept (processes are ours' live ones)
and the report says so. A side taken whole is parsed first (a DataError
naming the image when it does not parse). Reads image blobs, writes one blob.
"""
from __future__ import annotations

from ...image import manifest as img, layercheck
from .env import REDACTED, Env
from ...merge.layer import LayerResult, MergeContext
from ...merge.tree3 import AMBIGUOUS, MISSING, base_entry, blob, entry, merge_mapping, pick, virtual_mapping


def _env(git, image) -> Env:
    return layercheck.load(git, image, img.WORLD_ENV, Env()) if image is not None else Env()


def _keys(env: Env) -> dict:
    out = {("var", k): v for k, v in env.vars.items()}
    if env.cwd is not None:
        out[("cwd", "")] = env.cwd
    return out


class EnvMerger:
    name = "env"

    def merge(self, ctx: MergeContext) -> LayerResult:
        git = ctx.repo.git
        changes, report, conflicts, parts = {}, {}, [], []
        b, o, t = base_entry(git, ctx.bases, img.WORLD_ENV), entry(git, ctx.ours, img.WORLD_ENV), entry(git, ctx.theirs, img.WORLD_ENV)
        choice = pick(b, o, t)
        summary = None
        if choice == "theirs":
            _env(git, ctx.theirs)  # a side taken whole must parse
            changes[img.WORLD_ENV] = t
            summary = _fields(ctx.theirs)
        elif choice == "both":
            env, keys = self._merge_env(git, ctx)
            conflicts = [f"CONFLICT (env): {_name(k)} changed differently on both sides" for k in keys]
            changes[img.WORLD_ENV] = blob(git, env.encode())
            summary = {"env_vars": len(env.vars), "redacted": len(env.redacted)}
            report["conflicting_keys"] = [_name(k) for k in keys]
            choice = "merged"
        report["resolution"] = choice
        parts.append(choice)
        procs = pick(base_entry(git, ctx.bases, img.WORLD_PROCS), entry(git, ctx.ours, img.WORLD_PROCS),
                     entry(git, ctx.theirs, img.WORLD_PROCS))
        if procs == "theirs":
            layercheck.load(git, ctx.theirs, img.WORLD_PROCS)  # a side taken whole must parse
            changes[img.WORLD_PROCS] = entry(git, ctx.theirs, img.WORLD_PROCS)
        if procs not in ("unchanged", "same"):
            report["procs"] = "kept ours (both changed; processes cannot merge)" if procs == "both" else procs
            parts.append(f"procs={'ours' if procs == 'both' else procs}")
        return LayerResult("env", not conflicts, changes, summary, report, conflicts, "env " + " ".join(parts))

    def _merge_env(self, git, ctx: MergeContext) -> tuple[Env, list]:
        sides = [_env(git, ctx.ours), _env(git, ctx.theirs)]
        bases = [_env(git, b) for b in ctx.bases]
        merged, conflicts = merge_mapping(virtual_mapping([_keys(e) for e in bases]), _keys(sides[0]), _keys(sides[1]))
        redacted = set(sides[0].redacted) | set(sides[1].redacted)
        variables = {k[1]: v for k, v in merged.items() if k[0] == "var"}
        cwd = merged.get(("cwd", ""), None)
        keep = sorted(k for k, v in variables.items() if k in redacted and v == REDACTED)
        return Env(cwd if cwd not in (MISSING, AMBIGUOUS) else None, variables, keep), conflicts


def _name(key: tuple) -> str:
    return "cwd" if key[0] == "cwd" else key[1]


def _fields(image) -> dict | None:
    world = image.manifest.get("layers", {}).get("world") or {}
    picked = {k: world[k] for k in ("env_vars", "redacted") if k in world}
    return picked or None
