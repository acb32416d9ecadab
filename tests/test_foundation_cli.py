"""The git-pf command as a user runs it: help, JSON output, and one clear line for every mistake."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import BIN, git_fsck_clean
from world_helpers import describe, make_grid, make_sandbox


def _ok_error(proc, code=2, needle=None):
    assert proc.returncode == code, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    if needle:
        assert needle in lines[0], lines[0]


def test_version_and_help_on_every_command(run_pf):
    assert run_pf("--version").stdout.startswith("git-pf ")
    top = run_pf("-h").stdout
    # the commands, listed in groups (images, branches and tags, ...) after the options
    commands = [line.split()[0] for line in top.split("Options:")[1].splitlines()
                if line.startswith("  ") and not line.lstrip().startswith("-")]
    assert {"init", "snapshot", "show", "log", "ls", "tag", "branch", "checkout", "fork", "diff", "fsck"} <= set(commands)
    for cmd in commands:
        proc = run_pf(cmd, "-h")
        assert "Usage: git pf " + cmd in proc.stdout


def test_end_to_end_through_the_cli(run_pf, tmp_path):
    run_pf("init", "repo")
    run_pf("init", "repo")  # idempotent
    repo = tmp_path / "repo"
    sb = make_sandbox(tmp_path / "sb")
    (tmp_path / "m.jsonl").write_text('{"role":"user","content":"hi"}\n')
    (tmp_path / "e.jsonl").write_text(json.dumps({"ts": 1, "tool": "t", "args_hash": "a", "result_hash": "r",
                                                  "idempotency_key": "k", "side_effect_class": "pure"}) + "\n")
    (tmp_path / "env.json").write_text('{"cwd": "/work", "env": {"HOME": "/root", "API_TOKEN": "abc"}}')
    image = run_pf("snapshot", "--fs-root", sb, "--agent", "coder/1.0", "--messages", tmp_path / "m.jsonl",
                   "--effects", tmp_path / "e.jsonl", "--env", tmp_path / "env.json", "-m", "first", cwd=repo).stdout.strip()
    assert len(image) == 40
    shown = json.loads(run_pf("show", "HEAD", "--json", cwd=repo).stdout)
    assert shown["id"] == image and shown["manifest"]["agent"] == {"kind": "coder", "version": "1.0", "fingerprint": None}
    assert shown["manifest"]["layers"]["trace"]["messages"] == 1
    (sb / "notes.txt").write_text("changed\n")
    second = json.loads(run_pf("snapshot", "--fs-root", sb, "--json", cwd=repo).stdout)
    assert second["branch"] == "main" and not second["unchanged"]
    forks = run_pf("fork", "main", "-n", "3", "--explore", "alt", cwd=repo).stdout.split("\n")
    assert [l.split()[1] for l in forks if l] == ["main-fork-1", "main-fork-2", "main-fork-3"]
    log = json.loads(run_pf("log", "--json", cwd=repo).stdout)
    assert [i["id"] for i in log][-1] == image and len(log) == 2
    assert "first" in run_pf("log", "--graph", cwd=repo).stdout
    stat = run_pf("diff", "main~1", "main", "--stat", cwd=repo).stdout
    assert "world:   0 added, 1 changed, 0 removed" in stat
    listing = json.loads(run_pf("ls", "--json", cwd=repo).stdout)
    assert {e["name"] for e in listing} == {"main", "main-fork-1", "main-fork-2", "main-fork-3"}
    run_pf("tag", "good", "main~1", cwd=repo)
    assert "good" in run_pf("tag", cwd=repo).stdout
    run_pf("checkout", "good", "--into", tmp_path / "out", "--layers", "world,trace,effects,env", cwd=repo)
    out = tmp_path / "out"
    assert (out / "notes.txt").read_text() == "notes\n"
    assert (out / ".pf" / "trace" / "messages.jsonl").read_text() == '{"content":"hi","role":"user"}\n'
    env = json.loads((out / ".pf" / "world" / "env.json").read_text())
    assert env["env"]["API_TOKEN"] == "<redacted>" and env["cwd"] == "/work"
    _ok_error(run_pf("checkout", "main", "--into", out, cwd=repo, check=False), needle="not empty")
    run_pf("checkout", "main", "--into", out, "--force", cwd=repo)
    assert (out / "notes.txt").read_text() == "changed\n" and not (out / ".pf").exists()
    assert json.loads(run_pf("fsck", "--json", cwd=repo).stdout)["ok"] is True
    git_fsck_clean(repo)


def test_bad_input_gets_one_line(run_pf, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    _ok_error(run_pf("log", cwd=plain, check=False), needle="not a git repository")
    run_pf("init", "repo")
    repo = tmp_path / "repo"
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f").write_text("x")
    _ok_error(run_pf("show", "nope", cwd=repo, check=False), needle="unknown revision 'nope'")
    _ok_error(run_pf("snapshot", "--fs-root", tmp_path / "missing", cwd=repo, check=False), needle="does not exist")
    _ok_error(run_pf("snapshot", "--fs-root", repo / ".git" / "objects", cwd=repo, check=False), needle="inside the git directory")
    _ok_error(run_pf("snapshot", "--fs-root", sb / "f", cwd=repo, check=False), needle="not a directory")
    os.symlink("loop_b", tmp_path / "loop_a")
    os.symlink("loop_a", tmp_path / "loop_b")
    _ok_error(run_pf("snapshot", "--fs-root", tmp_path / "loop_a", cwd=repo, check=False), needle="symlink loop")
    (tmp_path / "bad.jsonl").write_text('{"ok": 1}\n{"broken": \n')
    _ok_error(run_pf("snapshot", "--fs-root", sb, "--messages", tmp_path / "bad.jsonl", cwd=repo, check=False),
              needle="bad.jsonl:2")
    (tmp_path / "list.jsonl").write_text('[1, 2]\n')
    _ok_error(run_pf("snapshot", "--fs-root", sb, "--effects", tmp_path / "list.jsonl", cwd=repo, check=False),
              needle="list.jsonl:1")
    _ok_error(run_pf("snapshot", "--fs-root", sb, "--name", "bad..name", cwd=repo, check=False), needle="not a valid")
    # a name that would read as an option wherever it is handed to a command
    _ok_error(run_pf("snapshot", "--fs-root", sb, "--name=-x", cwd=repo, check=False), needle="'-x' is not a valid")
    _ok_error(run_pf("snapshot", "--fs-root", sb, "--bogus", cwd=repo, check=False), needle="--bogus")
    _ok_error(run_pf("checkout", "main", "--into", tmp_path / "o", "--layers", "world,bogus", cwd=repo, check=False))
    _ok_error(run_pf("fork", "main", "-n", "0", cwd=repo, check=False))
    assert run_pf("ls", "--json", cwd=repo).stdout.strip() == "[]"  # nothing half-written
    git_fsck_clean(repo)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root to run as another user")
def test_permission_denied_file(run_pf):
    tmp_path = Path(tempfile.mkdtemp(prefix="pf-perm-"))  # pytest's own tmp dirs are private to root
    request_cleanup = lambda: shutil.rmtree(tmp_path, ignore_errors=True)
    os.chmod(tmp_path, 0o777)
    run_pf("init", "repo", cwd=tmp_path)
    repo = tmp_path / "repo"
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "ok").write_text("x")
    (sb / "private").write_text("secret")
    os.chmod(sb / "private", 0o600)
    subprocess.run(["chown", "-R", "65534:65534", str(repo)], check=True)
    # setpriv must start the Python entry point itself: once it has dropped root's capabilities, that
    # user may not reach an interpreter kept in root's home, which the C client's git-pf would exec
    entry = BIN / "git-pf-python" if (BIN / "git-pf-python").exists() else BIN / "git-pf"
    proc = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--",
                           str(entry), "snapshot", "--fs-root", str(sb)],
                          cwd=repo, capture_output=True, text=True,
                          env=dict(os.environ, HOME=str(tmp_path), GIT_CONFIG_GLOBAL="/dev/null",
                                   GIT_CONFIG_NOSYSTEM="1", PATH=os.environ["PATH"]))
    try:
        _ok_error(proc, needle="'private': permission denied")
    finally:
        request_cleanup()


def test_interrupted_snapshot_leaves_nothing_to_fix(run_pf, tmp_path):
    run_pf("init", "repo")
    repo = tmp_path / "repo"
    sb = make_grid(tmp_path / "sb", 40, 50, lambda d, f: os.urandom(2000))
    with open(sb / "big", "wb") as f:
        for _ in range(16):
            f.write(os.urandom(16 * 1024 * 1024))
    objects = repo / ".git" / "pf" / "objects"
    proc = subprocess.Popen([str(BIN / "git-pf"), "snapshot", "--fs-root", str(sb)], cwd=repo,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while sum(1 for p in objects.glob("tmp/*")) < 3 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.005)  # kill it once it is part way through the large file (chunks still in tmp/)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    assert run_pf("ls", "--json", cwd=repo).stdout.strip() == "[]"  # no ref
    assert not list(objects.glob("??/*"))  # no object under its name before the batch was durable
    git_fsck_clean(repo)
    assert json.loads(run_pf("fsck", "--json", cwd=repo).stdout)["ok"]
    # a write error (file size limit: EFBIG) part way through: one line, no ref
    proc = subprocess.run(["bash", "-c", f"ulimit -f 512; exec {BIN}/git-pf snapshot --fs-root {sb}"], cwd=repo,
                          capture_output=True, text=True)
    _ok_error(proc, code=1, needle="cannot write to the side store: File too large")
    assert run_pf("ls", "--json", cwd=repo).stdout.strip() == "[]"
    git_fsck_clean(repo)
    # and the next snapshot simply works
    first = run_pf("snapshot", "--fs-root", sb, cwd=repo).stdout.strip()
    run_pf("checkout", first, "--into", tmp_path / "out", cwd=repo)
    assert describe(tmp_path / "out") == describe(sb)


def test_core_commands_never_import_torch(run_pf, tmp_path):
    run_pf("init", "repo")
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f").write_text("x")
    script = (
        "import sys\n"
        "from git_pf.cli.app import main\n"
        f"assert main(['snapshot', '--fs-root', {str(sb)!r}, '-q']) == 0\n"
        "for cmd in (['log'], ['show'], ['ls'], ['diff', 'HEAD', 'HEAD'], ['fork', 'HEAD', '-n', '2'], ['fsck']):\n"
        "    assert main(cmd) == 0, cmd\n"
        "heavy = sorted(m for m in ('torch', 'safetensors', 'peft', 'transformers', 'pyfuse3') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path / "repo", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
