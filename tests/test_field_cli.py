"""Field fixes in the CLI: what chafed when the product was tried as a new user would."""
from __future__ import annotations

import json

from merge_helpers import snap


def _image(run_pf, tmp_path, name="main"):
    sb = tmp_path / "sb"
    sb.mkdir(exist_ok=True)
    (sb / "a.txt").write_text("a\n")
    run_pf("init", "repo")
    return run_pf("snapshot", "--fs-root", sb, "-q", cwd=tmp_path / "repo").stdout.strip()


def test_branch_on_an_existing_name_says_it_already_exists(run_pf, tmp_path):
    image = _image(run_pf, tmp_path)
    repo = tmp_path / "repo"
    run_pf("branch", "retry", image, cwd=repo)
    proc = run_pf("branch", "retry", image, cwd=repo, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()] and "already exists" in proc.stderr
    assert "while this command ran" not in proc.stderr


def test_merge_json_reports_a_conflicted_world_as_conflict_and_counts_paths_in_english(repo, run_pf, tmp_path):
    base = snap(repo, "main", {"doc.txt": "a\n", "other.txt": "o\n"})
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"doc.txt": "ours\n", "other.txt": "o\n"})
    snap(repo, "fork", {"doc.txt": "theirs\n", "other.txt": "o\n"})
    repo.switch("main")
    cwd = tmp_path / "repo"
    world = json.loads(run_pf("merge", "fork", "--json", cwd=cwd, check=False).stdout)["layers"][0]
    assert world["status"] == "conflict" and world["resolution"] == "conflict", world
    repo.create_branch("fork2", base.id)
    snap(repo, "fork2", {"doc.txt": "a\n", "other.txt": "changed\n"})
    repo.switch("main")
    proc = run_pf("merge", "fork2", "--dry-run", cwd=cwd)
    assert "1 path differs from ours" in proc.stdout, proc.stdout


def test_snapshot_onto_another_branch_keeps_the_current_one_unless_switch(run_pf, tmp_path):
    _image(run_pf, tmp_path)
    repo = tmp_path / "repo"

    def current() -> str:
        return next(e["name"] for e in json.loads(run_pf("branch", "--json", cwd=repo).stdout) if e["current"])

    run_pf("branch", "fork", cwd=repo)
    (tmp_path / "sb" / "b.txt").write_text("b\n")
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--name", "fork", "-q", cwd=repo)
    assert current() == "main"
    assert json.loads(run_pf("merge", "fork", "--json", cwd=repo).stdout)["branch"] == "main"  # a bare merge goes to main
    run_pf("branch", "other", cwd=repo)
    (tmp_path / "sb" / "c.txt").write_text("c\n")
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--name", "other", "--switch", "-q", cwd=repo)
    assert current() == "other"
    assert "Switched to branch 'main'" in run_pf("switch", "main", cwd=repo).stdout and current() == "main"
    proc = run_pf("switch", "nosuch", cwd=repo, check=False)
    assert proc.returncode == 2 and "no such branch 'nosuch'" in proc.stderr and current() == "main"
    run_pf("switch", "-c", "newbranch", cwd=repo)
    assert current() == "newbranch"
