"""``git pf record``, ``git pf replay`` and ``git pf run``: an agent's run as step images.

The agent's own output goes where it would; git-pf's summary is one line on
stderr, or the JSON report on stdout after the agent's output with
``--json`` (docs/record.md, "Commands"; exit codes in docs/cli.md).
"""
from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from ..core.errors import EXIT_NEGATIVE, UsageError
from .app import JsonOpt, app, emit, mount_manager, open_repo, say

RUN = {"allow_interspersed_args": False}  # record's CMD may follow without '--' (replay and run need it: REV comes first)
CmdArg = typer.Argument(..., metavar="-- CMD [ARGS]...", help="The agent to run, after '--'.")
UpstreamOpt = typer.Option([], "--upstream", metavar="[openai=|anthropic=]URL",
                           help="Where live requests go (repeatable; a bare URL is for both).")
IgnoreOpt = typer.Option([], "--ignore-field", metavar="JSONPATH",
                         help="A volatile request field left out of matching ($.a.b, $.messages[*].id; repeatable).")
MaskOpt = typer.Option([], "--mask", metavar="JSONPATH=REGEX",
                       help="Mask the regex's matches in the strings under JSONPATH before matching (repeatable).")
ProfileOpt = typer.Option(None, "--profile", metavar="NAME|FILE",
                          help="An agent profile's ignored fields and masks (claude-code, openai-agents, langgraph, or a TOML/JSON file).")


def match_rules(ignore_field, mask, profile):
    """The matching rules and profile of --ignore-field, --mask and --profile (bad input before anything runs)."""
    from ..runs.profiles import from_flags

    return from_flags(ignore_field, mask, profile)


def _finish_run(result, as_json: bool, verb: str) -> None:
    """Print a record or run result; exit with the agent's code, or 1 when the run could not finish."""
    problem = result.upstream_error or (f"internal proxy error: {result.failures[0]}" if result.failures else None)
    problem = problem or result.write_problem()
    emit(as_json, result.to_json(), lambda: problem or say(f"{verb} {result.steps} steps on '{result.branch}' "
                                                            f"(tip {(result.tip or '')[:7]}); the agent exited {result.exit}"))
    if problem:
        say(f"error: {problem}")
        raise typer.Exit(EXIT_NEGATIVE)
    raise typer.Exit(result.exit)


@app.command(context_settings=RUN)
def record(
    cmd: List[str] = CmdArg,
    name: Optional[str] = typer.Option(None, "--name", help="The branch the run's steps go on (default: run-N)."),
    fs_root: Optional[Path] = typer.Option(None, "--fs-root", help="The sandbox directory captured at every step."),
    upstream: List[str] = UpstreamOpt,
    no_inject: bool = typer.Option(False, "--no-inject", help="Do not hook a Python child's clock, uuid and random draws."),
    ignore_field: List[str] = IgnoreOpt,
    mask: List[str] = MaskOpt,
    profile: Optional[str] = typer.Option(None, "--profile", metavar="NAME|FILE", help="The agent profile stored with the run (default: picked from the requests' User-Agent)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run CMD behind a recording proxy: every LLM exchange becomes a step image on a new branch."""
    from ..runs.record import record as do_record

    rules, chosen = match_rules(ignore_field, mask, profile)
    result = do_record(open_repo(), list(cmd), name=name, fs_root=fs_root, upstreams=upstream, inject=not no_inject,
                       rules=rules, profile=chosen)
    _finish_run(result, as_json, "recorded")


@app.command()
def replay(
    rev: str = typer.Argument(..., help="The recorded run (its last step, or any later image of it)."),
    cmd: List[str] = CmdArg,
    realtime: bool = typer.Option(False, "--realtime", help="Keep the recorded delays (streamed chunks and whole responses)."),
    ignore_field: List[str] = IgnoreOpt,
    mask: List[str] = MaskOpt,
    profile: Optional[str] = ProfileOpt,
    allow_effects: bool = typer.Option(False, "--allow-effects", help="Let an irreversible tool call that is not on the ledger run."),
    fs_root: Optional[Path] = typer.Option(None, "--fs-root", help="Check the first step's world out here (absent or empty; default: a new temporary directory)."),
    # str, not Path: click stat()s a Path while parsing, which would hang on a stopped mount daemon
    mount: Optional[str] = typer.Option(None, "--mount", metavar="DIR", help="Mount the first step's world copy-on-write at DIR instead of checking it out (unmounted and discarded afterwards)."),
    keep_world: bool = typer.Option(False, "--keep-world", help="Keep the temporary world the replay checked out (default: removed when the replay ends)."),
    no_world_check: bool = typer.Option(False, "--no-world-check", help="Do not check that the world is each step's as recorded."),
    no_isolate: bool = typer.Option(False, "--no-isolate", help="Do not show the world at the path the run was recorded in (writes by that path then reach it)."),
    as_json: bool = JsonOpt,
) -> None:
    """Replay a recorded run to CMD: serve the tape and the draws, check every request, report whether it was bit-exact."""
    from ..runs.replaying import replay as do_replay

    ignore, _ = match_rules(ignore_field, mask, profile)  # with the rules the run was recorded with
    if mount is not None and fs_root is not None:
        raise UsageError("--mount and --fs-root cannot be used together")
    if keep_world and (mount is not None or fs_root is not None):
        raise UsageError("--keep-world is for the temporary world: --fs-root DIR stays anyway, a --mount is discarded")
    repo = open_repo()
    worlds = _world_cache(repo) if mount is None and fs_root is None and not keep_world else None
    with _mounted(repo, rev, mount, list(cmd), not no_isolate) as world:
        report = do_replay(repo, rev, list(cmd), realtime=realtime, ignore=ignore, allow_effects=allow_effects,
                           fs_root=fs_root, world=world, keep_world=keep_world, world_check=not no_world_check,
                           isolate=not no_isolate, worlds=worlds)
    emit(as_json, report.to_json(), lambda: report.problem() or say(report.summary()))
    if report.problem():
        say(f"error: {report.problem()}")
    raise typer.Exit(report.code)


def _world_cache(repo):
    """The repository's cache of worlds (docs/record.md, "The world cache"), or None when it is off."""
    from ..executors.worlds import WorldCache

    return WorldCache.of(repo)


@contextmanager
def _mounted(repo, rev: str, directory: Optional[str], cmd: List[str], isolate: bool = True):
    """Step 0 of REV's run mounted copy-on-write at ``directory`` for the block (None: nothing mounted);
    the mount's changes are discarded when it ends. What replay refuses (CMD, the world's git
    links: ``isolation``) is refused before anything is mounted."""
    if directory is None:
        yield None
        return
    from ..runs import child
    from ..runs.replaying import isolation, plan_of

    child.start_check(cmd, os.environ)  # before anything is mounted
    first = plan_of(repo, rev).first
    isolation(repo.git, first, first, isolate, Path(directory))
    manage = mount_manager()
    manage.mount(repo, first, directory, rw=True)
    try:
        yield Path(directory)
    finally:
        manage.umount(repo, directory, discard=True)


@app.command(name="run")
def run_cmd(
    branch: str = typer.Argument(..., help="A branch made by 'git pf fork --at-step'."),
    cmd: List[str] = CmdArg,
    upstream: List[str] = UpstreamOpt,
    ignore_field: List[str] = IgnoreOpt,
    mask: List[str] = MaskOpt,
    profile: Optional[str] = ProfileOpt,
    fs_root: Optional[Path] = typer.Option(None, "--fs-root", help="Check the run's step 0 world out here (absent or empty; default: a new temporary directory)."),
    resume_world: bool = typer.Option(False, "--resume-world", help="Start in the fork step's world instead of step 0's (for an agent that restores its own state)."),
    no_world_check: bool = typer.Option(False, "--no-world-check", help="Do not check that the world is each prefix step's as recorded."),
    no_isolate: bool = typer.Option(False, "--no-isolate", help="Do not show the world at the path the run was recorded in (writes by that path then reach it)."),
    as_json: bool = JsonOpt,
) -> None:
    """Run CMD on from a fork's changed step: the steps before it from the tape, then live, recorded as new steps."""
    from ..runs.runon import prefix_where, run

    ignore, _ = match_rules(ignore_field, mask, profile)
    repo = open_repo()
    result, prefix = run(repo, branch, list(cmd), upstreams=upstream, fs_root=fs_root, ignore=ignore,
                         resume_world=resume_world, world_check=not no_world_check, isolate=not no_isolate,
                         worlds=_world_cache(repo) if fs_root is None else None)
    if prefix.mismatch is not None or prefix.world is not None:
        problem = prefix.mismatch or prefix.world
        emit(as_json, dict(result.to_json(), mismatch=prefix.mismatch and prefix.mismatch.to_json(),
                           world_divergence=prefix.world and prefix.world.to_json()), lambda: None)
        kind = "mismatch" if prefix.mismatch is not None else "divergence"
        say(f"error: run {kind} {prefix_where(problem.step, prefix.fork_step)}: {problem.line}")
        raise typer.Exit(EXIT_NEGATIVE)
    _finish_run(result, as_json, "ran on: recorded")
