"""``git pf install`` / ``uninstall``: chain the pre-push hook and write the remote config.

Hooks go into the directory git itself uses (``core.hooksPath`` honoured). A
hook already there is renamed ``<hook>.pf-chained`` and still runs first,
keeping its veto. Fetch refspecs bring image branches and tags into
``refs/pf/remotes/<r>/`` only, so a plain ``git fetch`` never moves a local
branch or tag (``git pf fetch`` then creates the tags the repository lacks); an
older install's forced ``+refs/pf/tags/*:refs/pf/tags/*`` is taken out. Push
refspecs (with ``HEAD`` when the remote had none and HEAD has a commit, so
a plain ``git push`` still pushes the current branch) send image branches
and tags. Blame runs (``refs/pf/blame/``) are pushed as they are (never forced) and
fetched into ``refs/pf/remotes/<r>/blame/``, so a fetch never overwrites a local run. What was
added is recorded in ``$GIT_DIR/pf/install.json`` so ``uninstall`` removes
exactly that and puts back the hook it displaced. Installing twice changes
nothing. Never touches a hook that is not ours.
"""
from __future__ import annotations

import json
import os
import sys
from importlib import resources
from pathlib import Path

from ..core.errors import PfError, UsageError
from . import gitcmd, remotes

HOOKS = ("pre-push",)
BLAME_PUSH = "refs/pf/blame/*:refs/pf/blame/*"  # blame runs (docs/blame.md, "Storage"): pushed as they are, never forced
MARKER = "# git-pf-hook:"
CHAINED = ".pf-chained"
FORCED_TAGS = "+refs/pf/tags/*:refs/pf/tags/*"  # written by older installs; taken out


def _state_path(repo) -> Path:
    return repo.git_dir / "pf" / "install.json"


def _load_state(repo) -> dict:
    path = _state_path(repo)
    if not path.is_file():
        return {"hooks": {}, "config": []}
    return json.loads(path.read_text())


def _save_state(repo, state: dict) -> None:
    path = _state_path(repo)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)


def hooks_dir(repo) -> Path:
    cwd = remotes.workdir(repo)
    out = gitcmd.run(repo.git_dir, ["rev-parse", "--git-path", "hooks"], cwd=cwd).stdout.decode().strip()
    return (cwd / out).resolve() if not os.path.isabs(out) else Path(out)


def hook_text(name: str) -> str:
    text = resources.files("git_pf.hooks").joinpath(name).read_text()
    return text.replace("@PYTHON@", sys.executable)


def is_ours(path: Path) -> bool:
    try:
        return path.is_file() and not path.is_symlink() and MARKER in path.read_text(errors="replace")[:200]
    except OSError:
        return False


def _install_hook(directory: Path, name: str, state: dict) -> bool:
    path = directory / name
    chained = directory / (name + CHAINED)
    if is_ours(path):
        if path.read_text() != hook_text(name):
            path.write_text(hook_text(name))
        return False
    if os.path.lexists(path):
        if os.path.lexists(chained):
            raise PfError(f"cannot install: both '{path}' and '{chained}' exist; move one away")
        os.rename(path, chained)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.pf-tmp"
    tmp.write_text(hook_text(name))
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    state["hooks"][str(path)] = {"chained": os.path.lexists(chained)}
    return True


def _config_values(repo, key: str) -> list[str]:
    proc = gitcmd.run(repo.git_dir, ["config", "--get-all", key], check=False)
    return proc.stdout.decode().splitlines() if proc.returncode == 0 else []


def _add_config(repo, key: str, value: str, state: dict) -> bool:
    if value in _config_values(repo, key):
        return False
    gitcmd.run(repo.git_dir, ["config", "--add", key, value])
    state["config"].append([key, value])
    return True


def remote_config(remote: str, had_push: bool, head_born: bool = True) -> list[tuple[str, str]]:
    """The config lines for ``remote``. ``HEAD`` is pushed too when the remote had no push
    refspec of its own and HEAD names a commit: with HEAD unborn (a repository that holds only
    images) git refuses the whole push over it, so it is added by a later install instead."""
    r = remotes.Remote(remote, "", Path("."))
    out = [(f"remote.{remote}.fetch", spec) for spec in (f"+refs/pf/heads/*:{r.tracking('heads/*')}",
                                                          f"+refs/pf/tags/*:{r.tracking('tags/*')}",
                                                          f"+refs/pf/blame/*:{r.tracking('blame/*')}")]
    push = ["refs/pf/heads/*:refs/pf/heads/*", "refs/pf/tags/*:refs/pf/tags/*", BLAME_PUSH]
    if not had_push and head_born:
        push.insert(0, "HEAD")
    return out + [(f"remote.{remote}.push", spec) for spec in push]


def _drop_forced_tags(repo, remote: str, state: dict, changed: dict) -> None:
    """Take out the forced tag refspec an older install added (it let a fetch move local tags)."""
    entry = [f"remote.{remote}.fetch", FORCED_TAGS]
    if entry in state["config"]:
        gitcmd.run(repo.git_dir, ["config", "--unset-all", "--fixed-value", *entry], check=False)
        state["config"].remove(entry)
        changed["dropped"].append(f"{entry[0]}={entry[1]}")


def install(repo, remote: str | None = None) -> dict:
    """Install hooks and (when a remote exists) its config; returns what changed."""
    state = _load_state(repo)
    known = remotes.names(repo)
    if remote is not None and remote not in known:
        raise UsageError(f"no such remote '{remote}'")
    targets = [remote] if remote else (["origin"] if "origin" in known else known)
    directory = hooks_dir(repo)
    changed = {"hooks": [], "config": [], "dropped": [], "remotes": targets, "hooks_dir": str(directory)}
    for name in HOOKS:
        if _install_hook(directory, name, state):
            changed["hooks"].append(name)
    for r in targets:
        _drop_forced_tags(repo, r, state, changed)
        ours = {v for k, v in state["config"] if k == f"remote.{r}.push"}
        had_push = any(v not in ours for v in _config_values(repo, f"remote.{r}.push"))
        for key, value in remote_config(r, had_push, not repo.git.head_is_unborn):
            if _add_config(repo, key, value, state):
                changed["config"].append(f"{key}={value}")
    _save_state(repo, state)
    return changed


def uninstall(repo) -> dict:
    """Remove exactly what install added; put displaced hooks back."""
    state = _load_state(repo)
    removed = {"hooks": [], "config": []}
    for hook in list(state["hooks"]):
        path = Path(hook)
        chained = path.with_name(path.name + CHAINED)
        if is_ours(path):
            path.unlink()
            removed["hooks"].append(path.name)
        if os.path.lexists(chained) and not os.path.lexists(path):
            os.rename(chained, path)
        del state["hooks"][hook]
    for key, value in state["config"]:
        gitcmd.run(repo.git_dir, ["config", "--unset-all", "--fixed-value", key, value], check=False)
        removed["config"].append(f"{key}={value}")
        section = key.rsplit(".", 1)[0]
        if not gitcmd.run(repo.git_dir, ["config", "--get-regexp", "^" + section.replace(".", "\\.") + "\\."],
                          check=False).stdout:
            gitcmd.run(repo.git_dir, ["config", "--remove-section", section], check=False)
    _state_path(repo).unlink(missing_ok=True)
    return removed
