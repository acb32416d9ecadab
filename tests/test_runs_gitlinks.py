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


@pytest.fixture
def recorded(repo, run_pf, tmp_path):
    """A run recorded by the shell agent in a linked work tree of the user's project."""
    root, project, wt = repo.git_dir.parent, tmp_path / "project", tmp_path / "wt"
    subprocess.run(["git", "init", "-q", project], check=True)
    for k, v in (("user.name", "U"), ("user.email", "u@example.com")):
        git(project, "config", k, v)
    (project / "base.txt").write_text("base\n")
    git(project, "add", "base.txt")
    git(project, "commit", "-q", "-m", "base")
    git(project, "worktree", "add", "-q", "-b", "wt", str(wt))
    (wt / "notes.txt").write_text("notes\n")
    script = tmp_path / "agent.sh"
    script.write_text(AGENT)
    env = {"SEEN": str(tmp_path / "seen-record")}
    with FakeLLM(["a", "b", "c"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", wt, "--upstream", fake.url, "--", "sh", script, cwd=root,
               env=env)
    assert git(project, "log", "--format=%s", "wt").split("\n")[:2] == ["agent: two", "agent: one"]
    return root, project, wt, script


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


def test_a_git_link_naming_what_is_no_git_directory_of_the_users_is_refused(repo, run_pf, tmp_path):
    """The link's text comes from the image (possibly fetched): one naming a plain directory, or a
    system one, is refused in one line before the agent starts; one naming nothing is left alone."""
    root, sb, script = repo.git_dir.parent, tmp_path / "sb", tmp_path / "agent.sh"
    sb.mkdir()
    script.write_text("curl -sf -X POST \"$OPENAI_BASE_URL/chat/completions\" -H 'content-type: application/json' "
                      "-d '{\"model\":\"m\",\"messages\":[]}' >/dev/null\n")
    plain = tmp_path / "plain"
    plain.mkdir()
    for name, target in (("plain", plain), ("system", "/etc"), ("climbs", "../plain"), ("none", tmp_path / "gone")):
        (sb / ".git").write_text(f"gitdir: {target}\n")
        with FakeLLM(["hi"]) as fake:
            run_pf("record", "--name", name, "--fs-root", sb, "--upstream", fake.url, "--", "sh", script, cwd=root)
    # the recorded sandbox gone: only the link is left to decide
    shutil.rmtree(sb)
    for name, extra in (("plain", ()), ("system", ()), ("climbs", ("--fs-root", tmp_path / "w"))):
        proc = run_pf("replay", name, *extra, "--", "sh", script, cwd=root, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
        assert "git link '.git' names" in proc.stderr and ("not a git directory" in proc.stderr or
                                                           "another user's directory" in proc.stderr), proc.stderr
    assert report(run_pf("replay", "none", "--json", "--", "sh", script, cwd=root).stdout)["bit_exact"] is True
    assert sorted(p.name for p in plain.iterdir()) == []


def test_a_replay_in_a_submodule_keeps_the_superprojects_module_directory_unchanged(repo, run_pf, tmp_path):
    """A submodule's ``.git`` file names its git directory relatively (``../.git/modules/sub``):
    resolved as the agent sees it, at the recorded path, it is the superproject's, kept private."""
    root, lib, top = repo.git_dir.parent, tmp_path / "lib", tmp_path / "top"
    for r in (lib, top):
        subprocess.run(["git", "init", "-q", r], check=True)
        for k, v in (("user.name", "U"), ("user.email", "u@example.com")):
            git(r, "config", k, v)
        (r / "base.txt").write_text("base\n")
        git(r, "add", "base.txt")
        git(r, "commit", "-q", "-m", "base")
    git(top, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib), "sub")
    sub = top / "sub"
    assert (sub / ".git").read_text() == "gitdir: ../.git/modules/sub\n"
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
    assert private_dirs((Link(".git", "gitdir", "home/inner"),), str(world), shown) == []
    assert private_dirs((Link("inner/.git", "symlink", str(outside / ".git")),), str(world), shown) == [real]
