"""``git pf log``'s output, as a user reads it: every image newest first, with the date as git
prints the commit's (its own time zone, whatever the offset), its step and its subject, the
same through ``--oneline``; a commit on the line that is not an image is one line, exit 2."""
from __future__ import annotations

import re
import subprocess

import pygit2

from git_pf import Repo
from git_pf.image import refs

OFFSETS = [0, 330, -90, 840, -720, 45, -5, 60]  # minutes east of UTC, as git stores them


def _git(repo: Repo, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", str(repo.git_dir), *args], capture_output=True, check=True,
                          text=True).stdout


def _history(tmp_path) -> Repo:
    """One image, then copies of it as commits at several times and offsets, every third with
    a ``Pf-Step`` trailer."""
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f.txt").write_text("x\n")
    repo, _ = Repo.init(tmp_path / "repo")
    first = repo.snapshot(sb, name="main", message="first image").image
    git = repo.git
    tip = git[first.id]
    for i, offset in enumerate(OFFSETS * 3):
        sig = pygit2.Signature("a", "a@e", 1_700_000_000 + 86_400 * 40 * i + 3_600 * i, offset)
        msg = f"image {i}: ünïcode subject\n" + (f"\nPf-Step: {i}\n" if i % 3 == 0 else "")
        tip = git[git.create_commit(None, sig, sig, msg, tip.tree_id, [tip.id])]
    refs.update_branch(git, "main", str(tip.id), first.id, "test: history")
    return repo


def test_log_prints_what_git_prints_for_each_image(tmp_path, run_pf):
    repo = _history(tmp_path)
    where = str(tmp_path / "repo")
    out = run_pf("log", "-n", "20", cwd=where).stdout
    # git's own rendering of the same commits: "@@N@@" where an image has a step, "@@@@" where not
    expected = _git(repo, "log", "-n", "20", "--date=default", "refs/pf/heads/main",
                    "--format=image %H%nDate:   %cd%n@@%(trailers:key=Pf-Step,valueonly,separator=)@@%n    %s%n")
    expected = re.sub(r"\n@@@@\n", "\n\n", re.sub(r"\n@@(\d+)@@\n", r"\nStep:   \1\n\n", expected))
    # the day of the month as git-pf has always written it: two digits ("Mar 04", git: "Mar 4")
    expected = re.sub(r"^(Date:   \w{3} \w{3}) (\d) ", r"\1 0\2 ", expected, flags=re.M)
    assert out == expected
    assert out.count("Date:   ") == 20 and "Step:   21\n" in out
    oneline = run_pf("log", "--oneline", cwd=where).stdout.splitlines()
    subjects = _git(repo, "log", "--format=%h [step] %s", "--abbrev=12", "refs/pf/heads/main").splitlines()
    assert len(oneline) == len(subjects) == len(OFFSETS) * 3 + 1
    for i, (line, git_line) in enumerate(zip(oneline, subjects)):
        n = len(OFFSETS) * 3 - 1 - i  # the image's number, newest first; every third has a step
        want = git_line.replace("[step] ", f"[step {n}] " if n >= 0 and n % 3 == 0 else "")
        assert line == want
