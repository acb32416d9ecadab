"""Field fixes in the CLI: what chafed when the product was tried as a new user would."""
from __future__ import annotations


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
    import json

    from merge_helpers import snap

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
