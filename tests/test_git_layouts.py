"""git-pf in the repository layouts git itself makes besides a plain ``.git`` directory: a linked
work tree (``git worktree add``) and a work tree whose git directory is elsewhere (``git init
--separate-git-dir``). Images written from any work tree are the repository's, seen from all."""
from __future__ import annotations

import subprocess

import pytest

from conftest import git_fsck_clean


def git(*args, cwd):
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def ids_in_log(run_pf, cwd) -> list[str]:
    return [line.split()[1] for line in run_pf("log", cwd=cwd).stdout.splitlines() if line.startswith("image ")]


@pytest.mark.parametrize("server", ["1", "0"])
def test_images_written_from_a_linked_work_tree(tmp_path, run_pf, server):
    env = {"GIT_PF_SERVER": server}
    main = tmp_path / "main"
    main.mkdir()
    git("init", "-q", cwd=main)
    git("commit", "-q", "--allow-empty", "-m", "init", cwd=main)
    run_pf("init", cwd=main, env=env)
    (main / "sb").mkdir()
    (main / "sb" / "a.txt").write_text("from main\n")
    first = run_pf("snapshot", "--fs-root", "sb", "-m", "one", cwd=main, env=env).stdout.split()[-1]

    linked = tmp_path / "linked"
    git("worktree", "add", "-q", str(linked), cwd=main)
    (linked / "sb").mkdir()
    (linked / "sb" / "b.txt").write_text("from the linked work tree\n")
    second = run_pf("snapshot", "--fs-root", "sb", "-m", "two", cwd=linked, env=env).stdout.split()[-1]

    # the same history from both work trees, the new image on top
    assert ids_in_log(run_pf, linked)[:2] == [second, first]
    assert ids_in_log(run_pf, main)[:2] == [second, first]
    # its objects are in the shared object database: checkout from the main work tree has the file
    out = tmp_path / "out"
    run_pf("checkout", second, "--into", str(out), cwd=main, env=env)
    assert (out / "b.txt").read_text() == "from the linked work tree\n"
    assert "ok" in run_pf("fsck", cwd=main, env=env).stdout
    assert not list((main / ".git" / "worktrees").glob("*/objects")), "no object database per work tree"
    git_fsck_clean(main)


@pytest.mark.parametrize("server", ["1", "0"])
def test_a_separate_git_dir(tmp_path, run_pf, server):
    env = {"GIT_PF_SERVER": server}
    gd, wk = tmp_path / "store.git", tmp_path / "work"
    git("init", "-q", f"--separate-git-dir={gd}", str(wk), cwd=tmp_path)
    assert (wk / ".git").is_file()
    assert run_pf("init", cwd=wk, env=env).returncode == 0
    (wk / "sb").mkdir()
    (wk / "sb" / "f.txt").write_text("x\n")
    image = run_pf("snapshot", "--fs-root", "sb", "-m", "x", cwd=wk, env=env).stdout.split()[-1]
    (wk / "deeper").mkdir()
    assert ids_in_log(run_pf, wk / "deeper")[0] == image
    assert (gd / "pf").is_dir() and not (wk / ".git").is_dir()
    git_fsck_clean(gd)
