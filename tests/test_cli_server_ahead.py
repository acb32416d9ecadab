"""What a spare reads before its command comes (docs/server.md, "Read ahead"): the repository
opened and the current branch's newest images read, and still nothing stale: an image, a repack
or a config change made by another process between two served commands is seen by the next one,
whose output is the in-process output byte for byte; a client whose ``$HOME`` names other config
files gets a repository opened for it; ``Repo.open`` takes the spare's repository only where
opening the command's path gives that repository."""
from __future__ import annotations

import os
import subprocess
import sys

import pygit2
import pytest

from test_cli_server import _env, pf, running_server, status, wait_for, world  # noqa: F401

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the command server needs Linux")

READS = (("log",), ("log", "-n", "2", "--oneline"), ("log", "--json"), ("show",))


def _spare(repo) -> int:
    """The pid of the spare waiting for the next command (the server's one child then)."""
    server = status(repo)["pid"]

    def one():
        with open(f"/proc/{server}/task/{server}/children") as f:
            kids = f.read().split()
        return int(kids[0]) if len(kids) == 1 else None
    return wait_for(one, "the spare")


def _up(repo, env=None) -> dict:
    """The server's status once one runs (a served command starts one; its own output aside)."""
    def ready():
        state = status(repo, env)
        if not state["running"]:
            pf("-h", cwd=repo, env=env)
        return state if state["running"] else None
    return wait_for(ready, "a server")


def _same_as_in_process(repo, env=None) -> None:
    for args in READS:
        served = _up(repo, env)["served"]
        have = pf(*args, cwd=repo, env=env, check=False)
        assert status(repo, env)["served"] == served + 1, args  # the server ran it
        want = pf(*args, cwd=repo, env=dict(env or _env(), GIT_PF_SERVER="0"), check=False)
        assert (have.returncode, have.stdout, have.stderr) == (want.returncode, want.stdout, want.stderr), args


def test_the_spare_has_the_branch_read_before_its_command(world):
    """Waiting, the spare holds the packs of the current branch's images mapped (their indexes
    and the packs its commits, trees and manifests came from)."""
    repo, _, _ = world
    running_server(repo)
    pf("log", cwd=repo)  # the spare that follows a command is forked from a server that has served
    spare = _spare(repo)
    pack_dir = os.fsencode(str((repo / ".git" / "objects" / "pack").resolve()))

    def mapped():
        with open(f"/proc/{spare}/maps", "rb") as f:
            names = {line.split()[-1] for line in f if pack_dir in line}
        return names if any(n.endswith(b".pack") for n in names) and any(n.endswith(b".idx") for n in names) else None
    wait_for(mapped, "the spare to read the branch ahead")


def test_the_spare_has_every_pack_index_mapped(world):
    """Its command looks objects up in every pack without opening one: also a pack that holds
    nothing of the branch (a blob written by another program)."""
    repo, _, _ = world
    running_server(repo)
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=repo, input=b"elsewhere\n",
                          capture_output=True, check=True).stdout
    subprocess.run(["git", "pack-objects", "-q", ".git/objects/pack/pack"], cwd=repo, input=blob,
                   capture_output=True, check=True)
    pack_dir = (repo / ".git" / "objects" / "pack").resolve()
    newest = max(pack_dir.glob("*.pack"), key=lambda p: p.stat().st_mtime_ns)
    for p in pack_dir.glob(newest.stem + ".*"):  # the oldest pack: a lookup that finds its object never reaches it
        os.utime(p, (946684800, 946684800))
    pf("log", cwd=repo)  # the spare after this command is forked with that pack there
    spare = _spare(repo)
    indexes = {os.fsencode(str(p)) for p in pack_dir.glob("*.idx")}
    assert len(indexes) >= 2

    def mapped():
        with open(f"/proc/{spare}/maps", "rb") as f:
            return indexes <= {line.split()[-1] for line in f if len(line.split()) > 5}
    wait_for(mapped, "the spare to map every pack's index")


def test_another_process_writing_between_served_commands_is_seen(world):
    """An image, then a repack that deletes every pack the spare had mapped, then a new branch
    and a switch, each made by another process while a spare waits: the next served commands
    give what they give in-process."""
    repo, sb, ids = world
    running_server(repo)
    _same_as_in_process(repo)
    off = _env(GIT_PF_SERVER="0")
    (sb / "d" / "new.txt").write_text("new\n")
    new = pf("snapshot", "--fs-root", sb, "-q", "-m", "from another process", cwd=repo, env=off).stdout.strip()
    assert new not in ids
    _same_as_in_process(repo)
    assert pf("log", "-n", "1", cwd=repo).stdout.startswith(f"image {new}\n")
    subprocess.run(["git", "repack", "-a", "-d", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "prune-packed"], cwd=repo, check=True)
    _same_as_in_process(repo)
    pf("branch", "other", ids[0], cwd=repo, env=off)
    pf("switch", "other", cwd=repo, env=off)
    _same_as_in_process(repo)
    assert pf("log", "-n", "1", cwd=repo).stdout.startswith(f"image {ids[0]}\n")


def test_a_config_limit_set_between_served_commands_holds(world):
    """A manifest the spare parsed ahead is still refused by a command whose pf.maxJsonLine it
    is over: the same data error as in-process."""
    repo, _, _ = world
    running_server(repo)
    pf("log", cwd=repo)
    subprocess.run(["git", "config", "pf.maxJsonLine", "20"], cwd=repo, check=True)
    _same_as_in_process(repo)
    have = pf("log", cwd=repo, check=False)
    assert have.returncode == 3 and "pf.maxJsonLine (20)" in have.stderr, have.stderr


def test_a_client_with_another_home_reads_its_own_global_config(world, tmp_path):
    """The spare opened the repository under the server's ``$HOME``: a client whose ``$HOME``
    names another global config file gets the repository opened under its own."""
    repo, _, _ = world
    home = tmp_path / "home"
    home.mkdir()
    (home / ".gitconfig").write_text("[pf]\n\tmaxJsonLine = 20\n")
    running_server(repo)
    pf("log", cwd=repo)
    env = _env(HOME=str(home))
    _same_as_in_process(repo, env)
    have = pf("log", cwd=repo, env=env, check=False)
    assert have.returncode == 3 and "pf.maxJsonLine (20)" in have.stderr, have.stderr
    assert pf("log", cwd=repo).returncode == 0  # the server's own $HOME: no such limit


def test_repo_open_takes_the_repository_opened_ahead_only_where_it_is_that_one(tmp_path, monkeypatch):
    """A work tree whose ``.git`` file names the same git directory (``--separate-git-dir``) has
    another work tree: it is opened anew; a path inside the repository's own work tree (or the
    git directory) takes the repository opened ahead."""
    from git_pf import repo as repo_mod

    main, other, gd = tmp_path / "main", tmp_path / "other", tmp_path / "gd" / ".git"
    gd.parent.mkdir()
    subprocess.run(["git", "init", "-q", "--separate-git-dir", str(gd), str(other)], check=True)
    subprocess.run(["git", "init", "-q", str(main)], check=True)
    (main / "sub").mkdir()
    for git_dir, inside, outside in ((main / ".git", [main, main / "sub", main / ".git"], [other]),
                                     (gd, [gd], [other])):
        ahead = pygit2.Repository(str(git_dir))
        monkeypatch.setattr(repo_mod, "AHEAD", ahead)
        for path in inside:
            assert repo_mod.Repo.open(path).git is ahead, path
        for path in outside:
            opened = repo_mod.Repo.open(path)
            assert opened.git is not ahead, path
            assert opened.git.workdir is None or os.path.realpath(opened.git.workdir) == os.path.realpath(other)
    assert repo_mod.Repo.open(other).git.workdir.rstrip("/") == str(other.resolve())
