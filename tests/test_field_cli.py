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
