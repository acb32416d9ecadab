"""Start-up stays light and a closed pipe ends a command quietly (docs/cli.md).

Every ``git pf`` call pays for what the entry point imports, so ``import git_pf``
and ``git pf --version`` / ``-h`` must not load pygit2, torch, rich, zstandard or
the command implementations; these tests read ``sys.modules`` of a fresh
interpreter, so the laziness cannot regress unseen. Timing lives in
benchmarks/bench_cli.py, never here.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import BIN

HEAVY = ("pygit2", "torch", "rich", "zstandard", "pathspec", "pyfastcdc")
# What the CLI may load for --version and -h: the package root, its errors, the git-dir finder and the CLI layer.
LIGHT_PF = ("git_pf", "git_pf.core", "git_pf.core.errors", "git_pf.core.gitdir")


def _modules_after(code: str, cwd=None) -> dict:
    """Run ``code`` in a fresh interpreter; return its stdout and the modules it loaded."""
    body = "".join(f"    {line}\n" for line in code.splitlines())
    script = (f"import sys, json\ntry:\n{body}except SystemExit:\n    pass\n"
              "sys.stderr.write('MODULES ' + json.dumps(sorted(sys.modules)) + '\\n')\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=cwd)
    line = [l for l in proc.stderr.splitlines() if l.startswith("MODULES ")]
    assert line, proc.stderr
    return {"stdout": proc.stdout, "modules": set(json.loads(line[-1][len("MODULES "):]))}


def _heavy(modules: set) -> list:
    return sorted(m for m in modules if m.split(".")[0] in HEAVY)


def _implementation(modules: set) -> list:
    """git_pf modules outside the package root, its errors and the CLI layer."""
    return sorted(m for m in modules if m.startswith("git_pf") and m not in LIGHT_PF and not m.startswith("git_pf.cli"))


def test_import_git_pf_loads_nothing_heavy():
    got = _modules_after("import git_pf")
    assert _heavy(got["modules"]) == []
    assert _implementation(got["modules"]) == []


def test_lazy_exports_still_resolve():
    got = _modules_after("import git_pf\n"
                         "print(json.dumps([getattr(git_pf, n).__module__ for n in git_pf.__all__ if n != '__version__']))")
    assert set(json.loads(got["stdout"])) == {"git_pf.repo", "git_pf.image.manifest", "git_pf.core.errors", "git_pf.runs.tools"}


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["snapshot", "-h"], ["log", "-h"]])
def test_version_and_help_load_no_pygit2_torch_rich_nor_commands(args):
    got = _modules_after(f"sys.argv = ['git-pf', *{args!r}]\nimport git_pf.cli\ngit_pf.cli.main()")
    assert _heavy(got["modules"]) == []
    assert _implementation(got["modules"]) == []
    assert got["stdout"].strip(), "the command printed nothing"


def test_version_is_answered_before_typer_loads():
    got = _modules_after("sys.argv = ['git-pf', '--version']\nimport git_pf.cli\ngit_pf.cli.main()")
    assert got["stdout"].startswith("git-pf ")
    assert not {m for m in got["modules"] if m.split(".")[0] in ("typer", "click")}


def test_commands_convert_their_parameters_without_pydantic(run_pf, tmp_path):
    """Typer 0.2x would import pydantic (50-70 ms) to convert plain str/int/Path values."""
    run_pf("init", "repo")
    (tmp_path / "sb").mkdir()
    (tmp_path / "sb" / "a.txt").write_text("a\n")
    repo = tmp_path / "repo"
    run_pf("snapshot", "--fs-root", tmp_path / "sb", "--ignore", "*.tmp", "--ignore", "x/", "-m", "one", cwd=repo)
    for args in (["log", "-n", "5"], ["show", "HEAD"],
                 ["snapshot", "--fs-root", str(tmp_path / "sb"), "--kv-page-tokens", "8", "--ignore", "*.o", "-q"]):
        got = _modules_after(f"sys.argv = ['git-pf', *{args!r}]\nimport git_pf.cli\ngit_pf.cli.main()", cwd=repo)
        assert not {m for m in got["modules"] if m.split(".")[0] in ("pydantic", "pydantic_core", "torch")}, args
    assert "one" in run_pf("log", "-n", "1", cwd=repo).stdout


@pytest.mark.parametrize("args, message", [
    (["log", "-n", "abc"], "Invalid value for '-n' / '--max-count'"),
    (["snapshot", "--fs-root", ".", "--kv-page-tokens", "0"], "Invalid value for '--kv-page-tokens'"),
    (["merge", "x", "--density", "half"], "Invalid value for '--density'"),
])
def test_values_the_fast_conversion_does_not_take_get_typers_own_message(run_pf, tmp_path, args, message):
    run_pf("init", "repo")
    proc = run_pf(*args, cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"git pf: {message}") and proc.stderr.count("\n") == 1, proc.stderr


# Output after the first line must exceed a pipe's 64 KiB buffer, so that the reader
# (`head -1`) is gone while git-pf is still writing: the pipe is then certainly closed.
BIG = 120_000


@pytest.fixture
def big_images(run_pf, tmp_path):
    """Two images: the second has a 120 kB subject and 1,500 new variables, so log, show and
    diff print far more than a pipe holds."""
    run_pf("init", "repo")
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "a.txt").write_text("a\n")
    repo = tmp_path / "repo"
    first = run_pf("snapshot", "--fs-root", sb, "-m", "first", "-q", cwd=repo).stdout.strip()
    env = tmp_path / "env.json"
    env.write_text(json.dumps({f"VARIABLE_{i:05d}_{'X' * 60}": "v" for i in range(1500)}))
    second = run_pf("snapshot", "--fs-root", sb, "--env", env, "-m", "S" * BIG, "-q", cwd=repo).stdout.strip()
    return repo, first, second


@pytest.mark.parametrize("command, reader, first_line", [
    ("log", "head -1", "image {second}"),
    ("log --graph", "head -c 20", "* {short} SSS"),  # the 120 kB subject is its first line
    ("show", "head -1", "image {second}"),
    ("diff {first} {second}", "head -1", "world:   0 added, 0 changed, 0 removed"),
])
def test_closed_pipe_ends_quietly_with_141_as_git_does(big_images, command, reader, first_line):
    repo, first, second = big_images
    cmd = command.format(first=first, second=second)
    shell = f"git pf {cmd} | {reader}; echo \"status=${{PIPESTATUS[0]}}\" >&2"
    proc = subprocess.run(["bash", "-c", shell], cwd=repo, capture_output=True, text=True,
                          env=dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}"))
    out = proc.stdout.splitlines()
    assert len(out) == 1 and out[0].startswith(first_line.format(second=second, short=second[:7])), proc.stdout[:200]
    assert proc.stderr == "status=141\n"  # no traceback, no "Exception ignored", no message


def test_output_into_a_full_disk_is_an_error_not_a_closed_pipe(big_images):
    repo, _, _ = big_images
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    proc = subprocess.run(["bash", "-c", "git pf show >/dev/full"], cwd=repo, capture_output=True, text=True,
                          env=dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}"))
    assert proc.returncode == 1
    assert proc.stderr.startswith("git pf: error: No space left on device") and proc.stderr.count("\n") == 1


def test_fast_conversion_gives_what_typer_gives_for_every_parameter(tmp_path):
    """Every parameter of every command, fed sample values: where git_pf.cli.coerce converts a
    value itself, the result (value and type) is the one Typer's own conversion gives."""
    coercion = pytest.importorskip("typer._coercion")
    import typer

    from git_pf.cli import coerce, commands  # noqa: F401  (registers every command)
    from git_pf.cli.app import app

    (tmp_path / "f").write_text("x")
    samples = {str: ["x", "", "ünï code", "a b", "-"], bool: [True, False], int: ["0", "7", "-3", "+4", "007", 5, 16],
               float: ["0.5", "1", "-2e3", ".5", "5.", 2], "path": ["sb", "nonexistent/x", str(tmp_path / "f"),
                                                                     str(tmp_path), "."],
               "list": [("a", "b"), (), ["x"]]}
    taken = 0
    for command in typer.main.get_command(app).commands.values():
        for param in command.params:
            d = param.type_descriptor
            kind = ("path" if d.annotation is coerce.Path else "list" if d.annotation == coerce.List[str]
                    else d.annotation)
            for value in samples.get(kind, []):
                ours = coerce._convert(d.annotation, d.parameter_info, value)
                if ours is coerce._TYPER:
                    continue
                theirs = coercion.build_runtime_param(d)._coerce_value(value, param=param, ctx=None)
                assert (ours, type(ours)) == (theirs, type(theirs)), (command.name, param.name, value)
                taken += 1
    assert taken > 100  # the fast path did take the plain values


def test_python_dash_m_git_pf_goes_through_the_same_entry_point():
    got = _modules_after("sys.argv = ['git-pf', '--version']\nimport runpy\nrunpy.run_module('git_pf', run_name='__main__')")
    assert got["stdout"].startswith("git-pf ")
    assert not {m for m in got["modules"] if m.split(".")[0] in ("typer", "click")}  # answered early, as git-pf does
