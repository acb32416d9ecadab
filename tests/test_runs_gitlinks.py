"""A world recorded in a linked work tree (``git worktree add``): its ``.git`` file names the user's real
git directory. Replay, ``run`` and a blame trial start the agent with that directory as a private
overlay, so the agent's ``git commit`` succeeds there and the user's repository (refs, objects, index,
work tree list) is byte for byte unchanged. Real components: git, unshare and mount, the fake LLM
server, the proxy, the CLI, a shell agent."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from git_pf.runs import child
from git_pf.testing.fakellm import FakeLLM
from runs_helpers import git, report


@pytest.fixture(autouse=True)
def _no_cached_worlds_left(tmp_path):
    """The worlds kept for the repositories a test makes itself (docs/record.md, "The world cache")
    go when it ends, as the ``repo`` fixture's do."""
    yield
    from types import SimpleNamespace

    from git_pf.executors.worlds import WorldCache

    for git_dir in tmp_path.rglob(".git"):
        WorldCache.clear(SimpleNamespace(git_dir=git_dir))

pytestmark = pytest.mark.skipif(not child.namespaces_available(), reason="no private mount namespace here")

# Three exchanges; between them the agent commits in its world and says, outside it, what its git saw.
AGENT = r"""set -e
ask() { curl -sf -X POST "$OPENAI_BASE_URL/chat/completions" -H 'content-type: application/json' \
  -d "{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}]}" >/dev/null; }
cd "$GIT_PF_WORLD"
ask start
echo one >> notes.txt
git add notes.txt
git commit -q -m "agent: one"
git log -1 --format=%s >> "$SEEN"
ask second
echo two >> notes.txt
git commit -q -a -m "agent: two"
git status --porcelain | wc -l | tr -d ' ' >> "$SEEN"
ask third
"""


def fingerprint(project: Path) -> dict:
    """Everything of the user's repository a git command could change: every file under its git
    directory (refs, objects, indexes, logs, the work trees' records) and ``git worktree list``."""
    gitdir = project / ".git"
    files = {str(p.relative_to(gitdir)): p.read_bytes() for p in sorted(gitdir.rglob("*")) if p.is_file()}
    return {"files": files, "worktrees": git(project, "worktree", "list", "--porcelain"),
            "refs": git(project, "for-each-ref")}


def project(path: Path) -> Path:
    """A git repository at ``path`` with an identity and one commit of ``base.txt``."""
    subprocess.run(["git", "init", "-q", path], check=True)
    for k, v in (("user.name", "U"), ("user.email", "u@example.com")):
        git(path, "config", k, v)
    (path / "base.txt").write_text("base\n")
    git(path, "add", "base.txt")
    git(path, "commit", "-q", "-m", "base")
    return path


def with_submodule(tmp_path: Path) -> tuple[Path, Path]:
    """A superproject ``top`` with a real submodule ``sub`` (of a local repository): the superproject
    and the submodule's work tree."""
    lib, top = project(tmp_path / "lib"), project(tmp_path / "top")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub")
    assert (top / "sub" / ".git").read_text() == "gitdir: ../.git/modules/sub\n"
    return top, top / "sub"


# An agent that asks once.
ASK_ONCE = ("curl -sf -X POST \"$OPENAI_BASE_URL/chat/completions\" -H 'content-type: application/json' "
            "-d '{\"model\":\"m\",\"messages\":[]}' >/dev/null\n")


def refused(proc, what: str) -> None:
    """``proc`` was refused in one line, exit 2, saying ``what``."""
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and what in proc.stderr, proc.stderr


@pytest.fixture
def recorded(repo, run_pf, tmp_path):
    """A run recorded by the shell agent in a linked work tree of the user's project."""
    root, project_dir, wt = repo.git_dir.parent, project(tmp_path / "project"), tmp_path / "wt"
    git(project_dir, "worktree", "add", "-q", "-b", "wt", str(wt))
    (wt / "notes.txt").write_text("notes\n")
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    env = {"SEEN": str(tmp_path / "seen-record")}
    with FakeLLM(["a", "b", "c"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", wt, "--upstream", fake.url, "--", "sh", script, cwd=root,
               env=env)
    assert git(project_dir, "log", "--format=%s", "wt").split("\n")[:2] == ["agent: two", "agent: one"]
    return root, project_dir, wt, script


def test_a_replay_of_a_linked_work_tree_commits_privately_and_leaves_the_repository_unchanged(recorded, run_pf,
                                                                                             tmp_path):
    root, project, wt, script = recorded
    before = fingerprint(project)
    seen = tmp_path / "seen"
    proc = run_pf("replay", "run", "--json", "--", "sh", script, cwd=root, env={"SEEN": str(seen)}, check=False)
    assert proc.returncode == 0, proc.stderr
    out = report(proc.stdout)
    assert out["bit_exact"] is True and out["exit"] == 0 and out["world_checked"] is True
    # the agent's commits succeeded (set -e) on top of what the repository holds now, in its private view
    assert seen.read_text() == "agent: one\n0\n"
    assert fingerprint(project) == before
    # the recorded work tree gone (its git directory still there): no path to show the world at, but
    # the link still names the user's repository, so the replay still keeps it private
    shutil.rmtree(wt)
    before = fingerprint(project)
    seen.unlink()
    proc = run_pf("replay", "run", "--json", "--", "sh", script, cwd=root, env={"SEEN": str(seen)}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert report(proc.stdout)["bit_exact"] is True and seen.read_text() == "agent: one\n0\n"
    assert fingerprint(project) == before
    # where no mount namespace can be made (no unshare on PATH) that replay is refused in one line
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "sh", "curl"):
        (bare / tool).symlink_to(shutil.which(tool))
    proc = run_pf("replay", "run", "--", "sh", script, cwd=root, check=False,
                  env={"SEEN": str(seen), "PATH": f"{Path(sys.executable).parent}:{bare}"})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "git link '.git'" in proc.stderr and "--no-isolate" in proc.stderr
    assert fingerprint(project) == before


def test_run_and_a_blame_trial_of_a_linked_work_tree_leave_the_repository_unchanged(recorded, run_pf, tmp_path):
    root, project, wt, script = recorded
    before = fingerprint(project)
    (tmp_path / "reply.txt").write_text("changed")
    run_pf("fork", "run", "--at-step", "2", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    seen = tmp_path / "seen"
    with FakeLLM(["live"] * 4) as live:
        proc = run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--json", "--", "sh",
                      script, cwd=root, env={"SEEN": str(seen)}, check=False)
        assert proc.returncode == 0, proc.stderr
        assert report(proc.stdout)["steps"] == 1 and len(live.requests) == 1
        assert seen.read_text() == "agent: one\n0\n"
        assert fingerprint(project) == before
        seen.unlink()
        proc = run_pf("blame", "run", "--oracle", "grep -q never notes.txt", "-k", "1", "--steps", "2..2",
                      "--perturb", "none", "--upstream", live.url, "--no-mount", "--json", "--", "sh", script,
                      cwd=root, env={"SEEN": str(seen)}, check=False)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)["steps"]
    assert row["undefined"] == 0 and row["flips"] == 0
    assert seen.read_text() == "agent: one\n0\n"
    assert fingerprint(project) == before


def test_a_git_link_naming_what_is_no_git_directory_of_the_users_is_refused_before_anything_is_written(
        repo, run_pf, tmp_path):
    """The link's text comes from the image (possibly fetched): one naming a plain directory, or a
    system one, directly or through a symlink of the world, is refused in one line before the world
    is checked out (its --fs-root stays absent) and, in blame, before the first trial (no blame run,
    no trial's directory); one naming nothing is left alone."""
    root, sb, script = repo.git_dir.parent, tmp_path / "sb", tmp_path / "agent.sh"
    sb.mkdir()
    script.write_text(ASK_ONCE)
    plain = tmp_path / "plain"
    plain.mkdir()
    (sb / "esc").symlink_to(plain)
    for name, target in (("plain", plain), ("system", "/etc"), ("climbs", "../plain"), ("symlinked", "esc"),
                         ("none", tmp_path / "gone")):
        (sb / ".git").write_text(f"gitdir: {target}\n")
        with FakeLLM(["hi"]) as fake:
            run_pf("record", "--name", name, "--fs-root", sb, "--upstream", fake.url, "--", "sh", script, cwd=root)
    # the recorded sandbox gone: only the link is left to decide
    shutil.rmtree(sb)
    for name in ("plain", "system", "climbs", "symlinked"):
        proc = run_pf("replay", name, "--fs-root", tmp_path / "w", "--", "sh", script, cwd=root, check=False)
        refused(proc, "git link '.git' names")
        assert "not a git directory" in proc.stderr or "another user's directory" in proc.stderr, proc.stderr
        assert not (tmp_path / "w").exists()
    temp = tmp_path / "temp"
    temp.mkdir()
    with FakeLLM(["live"]) as live:
        proc = run_pf("blame", "symlinked", "--oracle", "false", "-k", "1", "--perturb", "none", "--upstream",
                      live.url, "--no-mount", "--", "sh", script, cwd=root, env={"TMPDIR": str(temp)}, check=False)
    refused(proc, "git link '.git' names")
    assert git(root, "for-each-ref", "refs/pf/blame") == "" and list(temp.iterdir()) == []
    assert report(run_pf("replay", "none", "--json", "--", "sh", script, cwd=root).stdout)["bit_exact"] is True
    assert sorted(p.name for p in plain.iterdir()) == []


def test_a_submodule_whose_core_worktree_names_a_directory_outside_the_world_is_refused(repo, run_pf, tmp_path):
    """Git takes the ``core.worktree`` of a git directory found through a ``.git`` file as the work
    tree: after ``git mv sub moved`` the submodule's git directory names ``moved``, so an agent's
    ``git rm`` in a world checked out at the recorded ``sub`` would delete the user's files there.
    Such a world is refused before it is checked out; the user's work tree is unchanged."""
    root, script = repo.git_dir.parent, tmp_path / "agent.sh"
    top, sub = with_submodule(tmp_path)
    script.write_text(ASK_ONCE + 'cd "$GIT_PF_WORLD" && git rm -q -f base.txt\n')
    with FakeLLM(["hi"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", sub, "--upstream", fake.url, "--", "sh", script, cwd=root)
    git(sub, "reset", "-q", "--hard")  # the recorded agent's git rm undone
    git(top, "mv", "sub", "moved")
    assert git(top, "config", "--file", ".git/modules/sub/config", "core.worktree") == "../../../moved\n"
    before, files = fingerprint(top), sorted(p.name for p in (top / "moved").iterdir())
    proc = run_pf("replay", "run", "--fs-root", sub, "--", "sh", script, cwd=root, check=False)
    refused(proc, "core.worktree names")
    assert f"'{os.path.realpath(top / 'moved')}'" in proc.stderr
    assert not sub.exists() and sorted(p.name for p in (top / "moved").iterdir()) == files
    assert fingerprint(top) == before


def test_a_git_directory_in_the_world_whose_core_worktree_names_a_directory_outside_it_is_refused(repo, run_pf,
                                                                                                  tmp_path):
    """The world's own ``.git`` directory comes from the image, possibly fetched: a ``core.worktree``
    there naming a directory outside the world, which git would take as the work tree, is refused
    before the world is checked out."""
    root, script = repo.git_dir.parent, tmp_path / "agent.sh"
    sb, elsewhere = project(tmp_path / "sb"), project(tmp_path / "elsewhere")
    git(sb, "config", "core.worktree", str(elsewhere))
    script.write_text(ASK_ONCE)
    with FakeLLM(["hi"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", sb, "--upstream", fake.url, "--", "sh", script, cwd=root)
    before = fingerprint(elsewhere)
    proc = run_pf("replay", "run", "--fs-root", tmp_path / "w", "--", "sh", script, cwd=root, check=False)
    refused(proc, "the core.worktree of the world's git directory '.git'")
    assert not (tmp_path / "w").exists() and fingerprint(elsewhere) == before


def test_a_replay_in_a_submodule_keeps_the_superprojects_module_directory_unchanged(repo, run_pf, tmp_path):
    """A submodule's ``.git`` file names its git directory relatively (``../.git/modules/sub``):
    resolved as the agent sees it, at the recorded path, it is the superproject's, kept private."""
    root = repo.git_dir.parent
    top, sub = with_submodule(tmp_path)
    for k, v in (("user.name", "U"), ("user.email", "u@example.com")):
        git(sub, "config", k, v)
    (sub / "notes.txt").write_text("notes\n")
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    with FakeLLM(["a", "b", "c"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", sub, "--upstream", fake.url, "--", "sh", script, cwd=root,
               env={"SEEN": str(tmp_path / "seen-record")})
    before = fingerprint(top)
    seen = tmp_path / "seen"
    proc = run_pf("replay", "run", "--json", "--", "sh", script, cwd=root, env={"SEEN": str(seen)}, check=False)
    assert proc.returncode == 0, proc.stderr
    assert report(proc.stdout)["bit_exact"] is True and seen.read_text() == "agent: one\n0\n"
    assert fingerprint(top) == before


def test_a_link_is_resolved_as_the_agent_sees_it_symlinks_of_the_world_followed(tmp_path):
    """``gitdir: esc/.git`` where the world's ``esc`` is a symlink out of it names the repository there;
    a world symlink by the recorded path stays in the world; a ``.git`` symlink is a link too."""
    from git_pf.runs.gitlinks import Link, private_dirs

    outside, world, shown = tmp_path / "outside", tmp_path / "world", str(tmp_path / "recorded")
    subprocess.run(["git", "init", "-q", outside], check=True)
    world.mkdir()
    (world / "esc").symlink_to(outside)
    (world / "home").symlink_to(shown)  # the recorded path: the world itself, in the agent's view
    (world / "inner").mkdir()
    (world / "inner" / ".git").symlink_to(outside / ".git")
    real = os.path.realpath(outside / ".git")
    assert private_dirs((Link(".git", "gitdir", "esc/.git"),), str(world), shown) == [real]
    assert private_dirs((Link(".git", "gitdir", "home/esc/.git"),), str(world), shown) == [real]
    # ".." after a symlink is taken as the kernel takes it: from where the symlink led
    assert private_dirs((Link(".git", "gitdir", "esc/../outside/.git"),), str(world), shown) == [real]
    assert private_dirs((Link(".git", "gitdir", "home/inner"),), str(world), shown) == []
    assert private_dirs((Link("inner/.git", "symlink", str(outside / ".git")),), str(world), shown) == [real]


def bad_link_run(run_pf, root: Path, tmp_path: Path, name: str = "bad") -> Path:
    """A run recorded in a sandbox whose ``.git`` file names a plain directory; the sandbox removed."""
    sb, script, plain = tmp_path / "sb", tmp_path / "agent.sh", tmp_path / "plain"
    sb.mkdir()
    plain.mkdir(exist_ok=True)
    script.write_text(ASK_ONCE)
    (sb / ".git").write_text(f"gitdir: {plain}\n")
    with FakeLLM(["hi"]) as fake:
        run_pf("record", "--name", name, "--fs-root", sb, "--upstream", fake.url, "--", "sh", script, cwd=root)
    shutil.rmtree(sb)
    return script


def test_run_from_a_fork_refuses_a_bad_git_link_before_its_fs_root_is_written(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    script = bad_link_run(run_pf, root, tmp_path)
    (tmp_path / "reply.txt").write_text("changed")
    run_pf("fork", "bad", "--at-step", "1", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    tip = git(root, "rev-parse", "refs/pf/heads/alt")
    with FakeLLM(["live"]) as live:
        proc = run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--", "sh", script,
                      cwd=root, check=False)
        assert live.requests == []
    refused(proc, "git link '.git' names")
    assert "not a git directory" in proc.stderr
    assert not (tmp_path / "w").exists() and git(root, "rev-parse", "refs/pf/heads/alt") == tip


@pytest.mark.skipif(not (shutil.which("fusermount3") and Path("/dev/fuse").exists()), reason="no FUSE here")
def test_replay_refuses_a_bad_git_link_before_it_mounts(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    script = bad_link_run(run_pf, root, tmp_path)
    proc = run_pf("replay", "bad", "--mount", tmp_path / "m", "--", "sh", script, cwd=root, check=False)
    refused(proc, "git link '.git' names")
    assert not (tmp_path / "m").exists()  # a mount makes its directory: none was made
    assert run_pf("mounts", cwd=root).stdout.strip() in ("", "no mounts")


def test_a_temporary_world_is_checked_where_it_is_made(repo, run_pf, tmp_path):
    """Without --fs-root the world goes to a new directory under $TMPDIR: a link naming a plain
    directory there (by a name the check could take for the world's own) is outside the world,
    refused in one line before the world is checked out, by replay and by run."""
    root, temp = repo.git_dir.parent, tmp_path / "temp"
    (temp / "pf-world-new").mkdir(parents=True)
    sb, script = tmp_path / "sb", tmp_path / "agent.sh"
    sb.mkdir()
    script.write_text(ASK_ONCE)
    (sb / ".git").write_text(f"gitdir: {temp / 'pf-world-new'}\n")
    with FakeLLM(["hi"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", sb, "--upstream", fake.url, "--", "sh", script, cwd=root)
    shutil.rmtree(sb)
    (tmp_path / "reply.txt").write_text("changed")
    run_pf("fork", "run", "--at-step", "1", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    with FakeLLM(["live"]) as live:
        for args in (("replay", "run", "--keep-world"), ("run", "alt", "--upstream", live.url)):
            proc = run_pf(*args, "--", "sh", script, cwd=root, env={"TMPDIR": str(temp)}, check=False)
            refused(proc, "git link '.git' names")
            assert "not a git directory" in proc.stderr
            assert [p.name for p in temp.iterdir()] == ["pf-world-new"]  # no world was checked out
        assert live.requests == []


def test_a_submodules_config_reached_through_a_symlink_is_followed_and_checked(repo, run_pf, tmp_path):
    """A submodule's git directory in the world whose ``config`` is a symlink: git reads it, and
    ``git config`` writes it, through the symlink. Out of the world it must be a config of a git
    directory of the user's, then kept private; a plain file is refused in one line, and so is a
    config in the world whose core.worktree names a directory outside it."""
    root = repo.git_dir.parent
    script = tmp_path / "agent.sh"
    script.write_text(ASK_ONCE + 'cd "$GIT_PF_WORLD/sub" && git config pf.agent wrote\n')
    top, _ = with_submodule(tmp_path)
    config = top / ".git" / "modules" / "sub" / "config"
    original = config.read_bytes()
    other, plain, elsewhere = project(tmp_path / "other"), tmp_path / "plain", project(tmp_path / "elsewhere")
    plain.mkdir()
    (plain / "config").write_bytes(original)
    (top / "notes").mkdir()
    (top / "notes" / "cfg").write_bytes(original + f"[core]\n\tworktree = {elsewhere}\n".encode())
    for name, target in (("other", other / ".git" / "config"), ("plain", plain / "config"),
                         ("inside", "../../../notes/cfg")):
        config.unlink()
        config.symlink_to(target)
        with FakeLLM(["hi"]) as fake:
            run_pf("record", "--name", name, "--fs-root", top, "--upstream", fake.url, "--", "sh", script, cwd=root)
    (plain / "config").write_bytes(original)
    git(other, "config", "--unset", "pf.agent")
    shutil.rmtree(top)
    before, kept = fingerprint(other), (plain / "config").read_bytes()
    proc = run_pf("replay", "other", "--json", "--", "sh", script, cwd=root, check=False)
    assert proc.returncode == 0, proc.stderr
    assert fingerprint(other) == before  # the agent's git config went to a private overlay
    proc = run_pf("replay", "plain", "--fs-root", tmp_path / "w", "--", "sh", script, cwd=root, check=False)
    refused(proc, "git link '.git/modules/sub/config' names")
    assert "not a git directory" in proc.stderr and not (tmp_path / "w").exists()
    proc = run_pf("replay", "inside", "--fs-root", tmp_path / "w", "--", "sh", script, cwd=root, check=False)
    refused(proc, "core.worktree names")
    assert str(elsewhere) in proc.stderr and not (tmp_path / "w").exists()
    assert (plain / "config").read_bytes() == kept
