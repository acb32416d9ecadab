"""``git pf snapshot``: capture a sandbox and its layers as a new image."""
from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import UsageError
from .app import JsonOpt, app, emit, open_repo, warn


@app.command()
def snapshot(
    fs_root: Optional[Path] = typer.Option(None, "--fs-root", help="The sandbox directory to capture."),
    # str, not Path: click stat()s a Path while parsing, which would hang on a stopped mount daemon
    mount: Optional[str] = typer.Option(None, "--mount", help="Snapshot a git-pf mount instead: only what changed in it is read."),
    name: Optional[str] = typer.Option(None, "--name", help="Branch to add the image to (default: the current one, else main)."),
    switch: bool = typer.Option(False, "--switch", help="Make that branch the current one (else the current branch stays)."),
    agent: Optional[str] = typer.Option(None, "--agent", help="Agent identity as KIND[/VERSION]."),
    agent_fingerprint: Optional[str] = typer.Option(None, "--agent-fingerprint", help="A hash identifying the agent's code/config."),
    messages: Optional[Path] = typer.Option(None, "--messages", help="JSONL of the full message trace."),
    effects: Optional[Path] = typer.Option(None, "--effects", help="JSONL of the full effects ledger."),
    rewrite_effects: bool = typer.Option(False, "--rewrite-effects", help="Let --effects drop or change the parent's entries (recorded in a Pf-Rewrite-Effects trailer)."),
    rewrite_reason: Optional[str] = typer.Option(None, "--rewrite-reason", help="Why the ledger is rewritten (the trailer's value; needs --rewrite-effects)."),
    env: Optional[Path] = typer.Option(None, "--env", help="JSON of {cwd, env} or a flat NAME->value map."),
    capture_env: bool = typer.Option(False, "--capture-env", help="Record this process's cwd and environment."),
    no_redact: List[str] = typer.Option([], "--no-redact", help="Keep this variable's (or tape key's) value even if it looks secret."),
    tape: Optional[Path] = typer.Option(None, "--tape", help="Recorded LLM exchanges: JSONL (one exchange per line) or a directory of .json files."),
    procs: Optional[Path] = typer.Option(None, "--procs", help="JSON of the agent's process table."),
    capture_procs: Optional[int] = typer.Option(None, "--capture-procs", metavar="PID", help="Record process PID and its descendants from /proc."),
    message: Optional[str] = typer.Option(None, "-m", "--message", help="Subject line of the image."),
    label: Optional[str] = typer.Option(None, "--label", help="What this line of work explores (inherited when omitted)."),
    ignore: List[str] = typer.Option([], "--ignore", help="A .gitignore-style pattern to skip (repeatable)."),
    allow_empty: bool = typer.Option(False, "--allow-empty", help="Write an image even when nothing changed."),
    kv: Optional[Path] = typer.Option(None, "--kv", help="KV cache to store: a safetensors file written by git_pf.cache.save."),
    model_fingerprint: Optional[str] = typer.Option(None, "--model-fingerprint", help="Model identity for --kv (weights sha256 or name@revision); default: the file's."),
    kv_page_tokens: int = typer.Option(16, "--kv-page-tokens", min=1, help="Tokens per KV page."),
    adapter: Optional[Path] = typer.Option(None, "--adapter", help="A peft adapter directory (adapter_config.json + adapter_model.safetensors) to store."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="Base weights the adapter applies to: NAME[@REVISION][:SHA256]."),
    delta: Optional[Path] = typer.Option(None, "--delta", help="A full-weight delta (.safetensors) to store."),
    quiet: bool = typer.Option(False, "-q", "--quiet", help="Print nothing but the image id; no warnings."),
    sign: bool = typer.Option(False, "-S", help="Sign the image as git commit -S does, with user.signingKey."),
    gpg_sign: Optional[str] = typer.Option(None, "--gpg-sign", metavar="KEYID", help="Sign the image with KEYID (as git's --gpg-sign=KEYID)."),
    as_json: bool = JsonOpt,
) -> None:
    """Snapshot the sandbox at --fs-root, or a mount (--mount), and the given layers as a new image; print its id.

    Layers not given (messages, effects, env) are carried over from the parent image."""
    from ..image.manifest import Agent
    from ..layers import registry

    if env is not None and capture_env:
        raise UsageError("--env and --capture-env cannot be used together")
    if kv is None and model_fingerprint is not None:
        raise UsageError("--model-fingerprint needs --kv")
    if (fs_root is None) == (mount is None):
        raise UsageError("give exactly one of --fs-root and --mount")
    if procs is not None and capture_procs is not None:
        raise UsageError("--procs and --capture-procs cannot be used together")
    if rewrite_reason is not None and not rewrite_effects:
        raise UsageError("--rewrite-reason needs --rewrite-effects")
    if rewrite_effects and effects is None:
        raise UsageError("--rewrite-effects needs --effects")
    repo = open_repo()
    # each layer reads its own flags into its input (Layer.input_from_flags), given by the layer's name
    flags = dict(messages=messages, tape=tape, effects=effects, env=env, capture_env=capture_env, procs=procs,
                 capture_procs=capture_procs, adapter=adapter, base_model=base_model, delta=delta, kv=kv,
                 model_fingerprint=model_fingerprint, kv_page_tokens=kv_page_tokens)
    inputs = {layer.name: layer.input_from_flags(flags) for layer in registry.layers()}
    if sign or gpg_sign:  # -S / --gpg-sign=KEYID: this command's image is signed
        from ..image.signing import sign_from_now

        sign_from_now(gpg_sign or True)
    take = repo.snapshot if mount is None else _mount_snapshot(repo)
    result = take(
        fs_root or mount,
        name=name,
        agent=Agent.parse(agent, agent_fingerprint),
        **{layer_name: given for layer_name, given in inputs.items() if given is not None},
        no_redact=set(no_redact),
        message=message,
        label=label,
        ignore=ignore,
        allow_empty=allow_empty,
        rewrite_effects=(rewrite_reason or True) if rewrite_effects else False,
        switch=switch,
    )
    if not quiet:
        for line in result.stats.skipped:
            warn(line)
        if result.unchanged and not as_json:
            warn(f"nothing changed since {result.image.short} on '{result.branch}'; no new image (use --allow-empty)")
    emit(as_json, result.to_json(), lambda: typer.echo(result.image.id))


def _mount_snapshot(repo):
    """``snapshot_mount`` bound to ``repo``: same options as ``Repo.snapshot``."""
    from functools import partial

    from ..mount.snapshot import snapshot_mount

    return partial(snapshot_mount, repo)
