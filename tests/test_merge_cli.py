"""``git pf merge`` as a user runs it: exit codes, --json, --dry-run, --prefer, and the
conflict workflow (--checkout with diff3 markers, --continue, --abort)."""
from __future__ import annotations

import json
import os

from git_pf.image import manifest as img
from merge_helpers import snap

LINES = "".join(f"line {i}\n" for i in range(1, 11))


def _conflicted(repo):
    base = snap(repo, "main", {"doc.txt": LINES, "pic.bin": b"\x00base", "same.txt": "s\n"},
                messages=[{"role": "user", "content": "go"}])
    repo.create_branch("fork", base.id)
    ours = snap(repo, "main", {"doc.txt": LINES.replace("line 5", "ours 5"), "pic.bin": b"\x00ours", "same.txt": "s\n"})
    theirs = snap(repo, "fork", {"doc.txt": LINES.replace("line 5", "theirs 5"), "pic.bin": b"\x00theirs",
                                 "same.txt": "s\n", "new.txt": "n\n"})
    repo.switch("main")
    return base, ours, theirs


def test_exit_codes_json_and_dry_run(repo, run_pf, tmp_path):
    cwd = tmp_path / "repo"
    base, ours, theirs = _conflicted(repo)
    refs_before = repo.refs()
    proc = run_pf("merge", "fork", "--json", cwd=cwd, check=False)
    assert proc.returncode == 1
    report = json.loads(proc.stdout)
    assert report["status"] == "conflict" and report["image"] is None and report["bases"] == [base.id]
    world = report["layers"][0]
    assert world["layer"] == "world" and world["status"] == "conflict"
    assert {c["path"] for c in world["conflicts"]} == {"doc.txt", "pic.bin"}
    assert {c["kind"] for c in world["conflicts"]} == {"contents", "binary"}
    assert report["conflicts"] == len(world["conflicts"]) and all(layer["status"] == "clean" for layer in report["layers"][1:])
    assert repo.refs() == refs_before  # a conflicted merge writes no image and no ref
    proc = run_pf("merge", "fork", "--dry-run", "--prefer", "world=theirs", cwd=cwd)
    assert "Dry run: the merge is clean; nothing written." in proc.stdout and repo.refs() == refs_before
    proc = run_pf("merge", "fork", "--prefer", "world=theirs", cwd=cwd)
    merged = repo.resolve("main")
    assert merged.parents == (ours.id, theirs.id) and "Merged: image" in proc.stdout
    assert repo.read_layer("main", "world/fs/pic.bin") == b"\x00theirs"
    assert "world prefer-theirs" in merged.trailer("Pf-Merge")
    for args, needle in ((["merge", "no-such"], "unknown revision"), (["merge", "fork", "--prefer", "world=mine"], "--prefer"),
                         (["merge"], "missing THEIRS"), (["merge", "fork", "--into", "nope"], "no such branch")):
        proc = run_pf(*args, cwd=cwd, check=False)
        assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert run_pf("merge", "fork", cwd=cwd).stdout.strip().endswith("Already up to date.")


def test_checkout_continue(repo, run_pf, tmp_path):
    cwd, dest = tmp_path / "repo", tmp_path / "resolve"
    base, ours, theirs = _conflicted(repo)
    proc = run_pf("merge", "fork", "--checkout", dest, "--prefer", "trace=ours", cwd=cwd, check=False)
    assert proc.returncode == 1 and f"--continue {dest}" in proc.stdout
    doc = (dest / "doc.txt").read_text()
    assert "<<<<<<< ours (main)\nours 5\n||||||| base\nline 5\n=======\ntheirs 5\n>>>>>>> theirs (fork)\n" in doc
    assert (dest / "pic.bin").read_bytes() == b"\x00ours" and (dest / "pic.bin~theirs").read_bytes() == b"\x00theirs"
    assert (dest / "new.txt").read_text() == "n\n"
    listing = (dest / ".pf" / "merge-conflicts.txt").read_text()
    assert "doc.txt" in listing and "pic.bin" in listing
    assert repo.resolve("main").id == ours.id
    # refused while markers or ~theirs files remain
    proc = run_pf("merge", "--continue", dest, cwd=cwd, check=False)
    assert proc.returncode == 1 and "doc.txt" in proc.stderr and "pic.bin~theirs" in proc.stderr
    (dest / "doc.txt").write_text(LINES.replace("line 5", "both 5"))
    os.remove(dest / "pic.bin~theirs")
    (dest / "extra.txt").write_text("added while resolving\n")
    proc = run_pf("merge", "--continue", dest, "--json", cwd=cwd)
    report = json.loads(proc.stdout)
    merged = repo.resolve("main")
    assert report["status"] == "merged" and report["image"] == merged.id
    assert merged.parents == (ours.id, theirs.id)
    assert repo.read_layer("main", "world/fs/doc.txt").decode() == LINES.replace("line 5", "both 5")
    assert repo.read_layer("main", "world/fs/extra.txt") == b"added while resolving\n"
    assert img.read_file(repo.git, merged.tree, b"world/fs/.pf/merge-conflicts.txt") is None
    assert {"world resolved-by-hand", "trace prefer-ours"} <= set(merged.trailer("Pf-Merge"))
    assert run_pf("merge", "--continue", dest, cwd=cwd, check=False).returncode == 2  # nothing in progress


def test_checkout_abort(repo, run_pf, tmp_path):
    cwd, dest = tmp_path / "repo", tmp_path / "resolve"
    _, ours, _ = _conflicted(repo)
    assert run_pf("merge", "fork", "--checkout", dest, cwd=cwd, check=False).returncode == 1
    proc = run_pf("merge", "fork", "--checkout", dest, cwd=cwd, check=False)
    assert proc.returncode == 2 and "not empty" in proc.stderr
    proc = run_pf("merge", "--abort", dest, cwd=cwd)
    assert not dest.exists() and repo.resolve("main").id == ours.id
    assert not list((repo.git_dir / "pf" / "merge").iterdir())


def test_merge_of_core_layers_never_imports_torch(repo, tmp_path):
    import subprocess
    import sys

    _conflicted(repo)
    script = (
        "import sys\n"
        "from git_pf.cli.app import main\n"
        "assert main(['merge', 'fork', '--prefer', 'world=ours', '--json']) == 0\n"
        "heavy = sorted(m for m in ('torch', 'safetensors', 'peft', 'transformers', 'pyfuse3') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "repo", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert len(repo.resolve("main").parents) == 2
