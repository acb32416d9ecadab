"""Malformed data inside an image (well-formed git, bad JSON or wrong types in a layer file) is a
data error: exit 3 with one line naming the image and the path, from every command that reads it;
``fsck`` reports it; a merge never writes an image holding a layer it could not parse. Images are
crafted with git plumbing, as someone pushing to a shared remote could."""
from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

import git_pf
from git_pf.core.errors import PfError

ROOT = Path(__file__).resolve().parent.parent

# case -> (layer path, bytes written there, what the error line must say)
CASES = {
    "attrs_path_not_a_string": ("world/fs.attrs.jsonl", b'{"path":1}\n', "path must be"),
    "attrs_line_not_an_object": ("world/fs.attrs.jsonl", b'["a.txt"]\n', "not a JSON object"),
    "attrs_line_not_json": ("world/fs.attrs.jsonl", b'{"path":\n', "not valid JSON"),
    "attrs_mode_not_octal": ("world/fs.attrs.jsonl", b'{"mode":"0999","path":"a.txt"}\n', "mode must be"),
    "attrs_mode_over_7777": ("world/fs.attrs.jsonl", b'{"mode":"17777","path":"a.txt"}\n', "mode must be"),
    "attrs_mode_a_number": ("world/fs.attrs.jsonl", b'{"mode":420,"path":"a.txt"}\n', "mode must be"),
    "attrs_xattr_bad_base64": ("world/fs.attrs.jsonl", b'{"path":"a.txt","xattrs":{"user.k":"!!"}}\n', "base64"),
    "attrs_path_b64_bad_base64": ("world/fs.attrs.jsonl", b'{"path_b64":"%%%"}\n', "base64"),
    "attrs_xattr_outside_user_namespace": ("world/fs.attrs.jsonl",
                                           b'{"path":"a.txt","xattrs":{"trusted.k":"YQ=="}}\n', "user."),
    "attrs_type_not_dir": ("world/fs.attrs.jsonl", b'{"path":"a.txt","type":"fifo"}\n', "type must be"),
    "attrs_pointer_not_a_bool": ("world/fs.attrs.jsonl", b'{"path":"a.txt","pointer":"yes"}\n', "pointer must be"),
    "env_not_json": ("world/env.json", b'{"env":', "not valid JSON"),
    "env_not_an_object": ("world/env.json", b'[]\n', "must be a JSON object"),
    "env_value_not_a_string": ("world/env.json", b'{"env":{"A":1}}\n', "env must be"),
    "env_cwd_not_a_string": ("world/env.json", b'{"cwd":5,"env":{}}\n', "cwd must be"),
    "procs_not_json": ("world/procs.json", b'[', "not valid JSON"),
    "procs_not_a_table": ("world/procs.json", b'[1]\n', "must be an object"),
    "procs_pid_not_an_integer": ("world/procs.json",
                                 b'{"processes":[{"argv":[],"cwd":null,"exe":null,"pid":"x","ppid":1,"uid":0}],'
                                 b'"root":null,"schema":1}\n', "pid must be"),
    "manifest_not_json": ("pf.json", b'{"schema":1', "not valid JSON"),
    "manifest_agent_not_an_object": ("pf.json", b'{"agent":"x","label":"","layers":{},"schema":1}\n', "agent"),
    "manifest_layers_not_an_object": ("pf.json", b'{"agent":{},"label":"","layers":[],"schema":1}\n', "layers"),
    "manifest_count_not_an_integer": ("pf.json",
                                      b'{"agent":{},"label":"","layers":{"world":{"files":"many"}},"schema":1}\n',
                                      "layers.world.files"),
    "manifest_nan": ("pf.json", b'{"agent":{},"label":"","layers":{"world":{"note":NaN}},"schema":1}\n',
                     "not valid JSON"),
    "messages_line_not_json": ("trace/messages.jsonl", b'{"role":"user"}\n{"role":\n', ":2: not valid JSON"),
    "messages_line_not_an_object": ("trace/messages.jsonl", b'[1]\n', "must be a JSON object"),
    "messages_nan": ("trace/messages.jsonl", b'{"n":NaN}\n', "not valid JSON"),
}


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True,
                          env=dict(os.environ, **(env or {}))).stdout.strip()


def craft(repo, parent: str, path: str, data: bytes, branch: str) -> str:
    """A commit on ``branch`` whose tree is ``parent``'s with ``data`` at ``path`` (git plumbing only)."""
    cwd, index = Path(repo.git_dir).parent, str(Path(repo.git_dir) / "craft-index")
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=cwd, input=data, check=True,
                          capture_output=True).stdout.decode().strip()
    env = {"GIT_INDEX_FILE": index}
    git(cwd, "read-tree", f"{parent}^{{tree}}", env=env)
    git(cwd, "update-index", "--add", "--cacheinfo", f"100644,{blob},{path}", env=env)
    tree = git(cwd, "write-tree", env=env)
    os.unlink(index)
    commit = git(cwd, "commit-tree", tree, "-p", parent, "-m", "crafted")
    git(cwd, "update-ref", f"refs/pf/heads/{branch}", commit)
    return commit


@pytest.fixture
def images(repo, tmp_path):
    """``main`` (base), ``ours`` (base + a change in another layer than the bad one) and a factory
    for ``bad`` (base + one malformed layer file)."""
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (sandbox / "a.txt").write_text("a\n")
    base = repo.snapshot(sandbox, name="main", messages=[{"role": "user", "content": "hi"}],
                         env={"HOME": "/root"}).image
    repo.create_branch("ours", "main")

    def make(path: str, data: bytes) -> str:
        # ours changes a layer the bad image leaves alone, so the merge is a real three-way one
        if path.startswith("world/env") or path.startswith("world/procs"):
            repo.snapshot(sandbox, name="ours", messages=[{"role": "user", "content": "hi"}, {"role": "assistant"}])
        else:
            repo.snapshot(sandbox, name="ours", env={"HOME": "/home/me"})
        return craft(repo, base.id, path, data, "bad")

    return make


def _refs(repo) -> str:
    return git(Path(repo.git_dir).parent, "for-each-ref", "--format=%(objectname) %(refname)")


def assert_data_error(proc, path: str, says: str, image: str) -> None:
    assert proc.returncode == 3, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
    assert f"image {image[:12]}" in lines[0] and path in lines[0] and says in lines[0], lines[0]


def _fsck_names(run_pf, cwd: Path, path: str, says: str, image: str) -> None:
    fsck = run_pf("fsck", "--json", cwd=cwd, check=False)
    assert fsck.returncode == 1, fsck.stderr
    problems = json.loads(fsck.stdout)["problems"]
    named = [p for p in problems if image[:12] in p and path in p]
    assert len(named) == 1 and says in named[0], problems


# one case per layer file goes through every command; the rest through show and fsck
FULL = ["attrs_path_not_a_string", "env_value_not_a_string", "procs_not_a_table", "manifest_agent_not_an_object",
        "messages_line_not_json"]


@pytest.mark.parametrize("case", FULL)
def test_malformed_layer_file_is_a_data_error_in_every_command(case, repo, images, run_pf, tmp_path):
    path, data, says = CASES[case]
    bad = images(path, data)
    cwd = Path(repo.git_dir).parent
    for args in (["diff", "main", "bad"], ["diff", "bad", "main"], ["show", "bad"],
                 ["merge", "bad", "--into", "ours"], ["merge", "ours", "--into", "bad"],
                 ["merge", "bad", "--into", "ours", "--dry-run"]):
        before = _refs(repo)
        assert_data_error(run_pf(*args, cwd=cwd, check=False), path, says, bad)
        assert _refs(repo) == before, args  # a merge that failed moved no ref
    if path in ("world/fs.attrs.jsonl", "pf.json"):  # the layer files a world checkout reads
        proc = run_pf("checkout", "bad", "--into", tmp_path / "co", cwd=cwd, check=False)
        assert_data_error(proc, path, says, bad)
        assert not (tmp_path / "co").exists()
    _fsck_names(run_pf, cwd, path, says, bad)


@pytest.mark.parametrize("case", [c for c in CASES if c not in FULL])
def test_malformed_layer_file_is_a_data_error(case, repo, images, run_pf):
    path, data, says = CASES[case]
    bad = images(path, data)
    cwd = Path(repo.git_dir).parent
    assert_data_error(run_pf("show", "bad", cwd=cwd, check=False), path, says, bad)
    _fsck_names(run_pf, cwd, path, says, bad)


def test_case_manifest_log_of_a_malformed_manifest_is_a_data_error(repo, images, run_pf):
    path, data, says = CASES["manifest_agent_not_an_object"]
    bad = images(path, data)
    assert_data_error(run_pf("log", "bad", cwd=Path(repo.git_dir).parent, check=False), path, says, bad)


@pytest.mark.parametrize("layer,path,data", [
    ("env", "world/env.json", b'{"env":{"A":1}}\n'),
    ("env", "world/procs.json", b'[1]\n'),
    ("trace", "trace/messages.jsonl", b'[1]\n'),
    ("world", "world/fs.attrs.jsonl", b'{"path":1}\n'),
])
def test_merge_prefer_theirs_of_an_unparseable_layer_writes_nothing(layer, path, data, repo, images, run_pf):
    bad = images(path, data)
    cwd = Path(repo.git_dir).parent
    before_refs = _refs(repo)
    before_objects = git(cwd, "rev-list", "--all", "--objects")
    proc = run_pf("merge", "bad", "--into", "ours", "--prefer", f"{layer}=theirs", cwd=cwd, check=False)
    assert_data_error(proc, path, "", bad)
    assert _refs(repo) == before_refs
    assert git(cwd, "rev-list", "--all", "--objects") == before_objects  # no new object is referenced


def test_case_fast_forward_to_an_unparseable_image_is_refused(repo, images, run_pf):
    bad = images("world/env.json", b'{"env":{"A":1}}\n')
    cwd = Path(repo.git_dir).parent
    before = _refs(repo)
    assert_data_error(run_pf("merge", "bad", "--into", "main", cwd=cwd, check=False), "world/env.json", "env must", bad)
    assert _refs(repo) == before


def test_case_user_files_stay_bad_input_exit_2(repo, run_pf, tmp_path):
    """The same parsers read a user's --messages and --procs files: malformed there is exit 2."""
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (tmp_path / "m.jsonl").write_bytes(b'{"role":"user"}\n[1]\n')
    (tmp_path / "p.json").write_text('[{"pid": 1, "ppid": "one"}]')
    cwd = Path(repo.git_dir).parent
    for flag, name, says in (("--messages", "m.jsonl", "m.jsonl:2: each line must be a JSON object"),
                             ("--procs", "p.json", "ppid must be")):
        proc = run_pf("snapshot", "--fs-root", sandbox, flag, tmp_path / name, cwd=cwd, check=False)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and says in proc.stderr, proc.stderr


def test_case_error_classes_the_python_api_names_are_importable_from_git_pf():
    text = (ROOT / "docs" / "python-api.md").read_text()
    sentence = text[text.index("Errors are `git_pf.PfError`"):].split("\n\n")[0]
    names = re.findall(r"`(?:git_pf\.)?([A-Z]\w+)`", sentence)
    assert "CorruptObject" in names and "DataError" in names
    for name in names:
        assert issubclass(getattr(git_pf, name), PfError), name


# checkout of the non-world layers parses what it would write: nothing is written when it is malformed
@pytest.mark.parametrize("layers,path,data,says", [
    ("env", "world/env.json", b'{"env":{"A":1}}\n', "env must be"),
    ("env", "world/procs.json", b'[1]\n', "must be an object"),
    ("trace", "trace/messages.jsonl", b'{"role":"user"}\n[1]\n', ":2: each line must be a JSON object"),
    ("effects", "effects/ledger.jsonl", b'[1]\n', ":1: each line must be a JSON object"),
    ("world,trace,effects,env", "world/env.json", b'{"cwd":5,"env":{}}\n', "cwd must be"),
    ("trace", "trace/tape/00000001-0123456789abcdef.json", b'{"request":', "not valid JSON"),
], ids=["env", "procs", "messages", "ledger", "env-beside-the-world", "tape-entry"])
def test_case_checkout_of_a_malformed_non_world_layer_writes_nothing(layers, path, data, says, repo, images, run_pf,
                                                                     tmp_path):
    bad = images(path, data)
    cwd = Path(repo.git_dir).parent
    area = tmp_path / "area"
    area.mkdir()
    proc = run_pf("checkout", "bad", "--layers", layers, "--into", area / "co", cwd=cwd, check=False)
    assert_data_error(proc, path, says, bad)
    assert os.listdir(area) == []  # no checkout, and no temporary directory beside it
    run_pf("checkout", "main", "--layers", layers, "--into", area / "co", cwd=cwd)  # the well-formed image checks out
    assert os.listdir(area) == ["co"]
