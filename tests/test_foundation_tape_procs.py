"""The recorded LLM exchanges (``trace/tape/``) and the process table (``world/procs.json``):
written by ``git pf snapshot``, carried over, restored by checkout, merged, and read back by dulwich."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from git_pf import Repo
from git_pf.layers.world import procs
from git_pf.layers.trace import tape


def _exchange(i: int, **extra) -> dict:
    return {"request": {"model": "m", "messages": [{"role": "user", "content": f"q{i}"}],
                        "headers": {"Authorization": "Bearer sk-live-abcdefgh12345678", "x-api-key": "k3y-123456789"}},
            "response": {"content": f"a{i}", "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
            "draws": [{"seed": i}], **extra}


def _jsonl(path, items) -> None:
    path.write_text("".join(json.dumps(x) + "\n" for x in items))


@pytest.fixture
def sandbox(tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "f.txt").write_text("x")
    return sb


def test_tape_is_stored_one_blob_per_exchange_redacted_and_restored(run_pf, tmp_path, sandbox):
    run_pf("init", "repo")
    tape_file = tmp_path / "tape.jsonl"
    _jsonl(tape_file, [_exchange(0), _exchange(1)])
    run_pf("snapshot", "--fs-root", sandbox, "--tape", tape_file, cwd=tmp_path / "repo")
    shown = json.loads(run_pf("show", "main", "--json", cwd=tmp_path / "repo").stdout)
    assert shown["manifest"]["layers"]["tape"] == {"exchanges": 2}

    run_pf("checkout", "main", "--into", tmp_path / "co", "--layers", "trace", cwd=tmp_path / "repo")
    files = sorted((tmp_path / "co" / "trace" / "tape").iterdir())
    assert [f.name[:9] for f in files] == ["00000000-", "00000001-"]
    first = json.loads(files[0].read_text())
    assert first["request"]["headers"] == {"Authorization": "<redacted>", "x-api-key": "<redacted>"}
    assert first["request"]["messages"][0]["content"] == "q0"  # only secrets are touched
    assert first["response"]["usage"] == {"prompt_tokens": 3, "completion_tokens": 4}

    # the checked-out directory is accepted back as --tape; appending keeps earlier blobs
    (tmp_path / "co" / "trace" / "tape" / "00000002-new.json").write_text(json.dumps(_exchange(2)))
    (sandbox / "f.txt").write_text("y")
    run_pf("snapshot", "--fs-root", sandbox, "--tape", tmp_path / "co" / "trace" / "tape", cwd=tmp_path / "repo")
    repo = Repo.open(tmp_path / "repo")
    one, two = repo.resolve("main~1"), repo.resolve("main")
    assert tape.read(repo.git, two.tree)[:2] == tape.read(repo.git, one.tree)
    assert len(tape.read(repo.git, two.tree)) == 3
    old = {e.name: e.id for e in repo.git.revparse_single(f"{one.tree}:trace/tape")}
    new = {e.name: e.id for e in repo.git.revparse_single(f"{two.tree}:trace/tape")}
    assert all(new[n] == oid for n, oid in old.items())
    assert repo.diff("main~1", "main").trace.exchanges_added == 1
    shown = run_pf("diff", "main~1", "main", cwd=tmp_path / "repo").stdout
    assert "tape 1 added, 0 removed" in shown and "other:" not in shown
    assert _dulwich_tape(tmp_path / "repo", two.tree) == {n.encode(): str(o).encode() for n, o in new.items()}


def _dulwich_tape(repo_dir, tree_hex: str) -> dict:
    """The tape entries of an image tree as an independent git implementation reads them."""
    from dulwich.object_store import tree_lookup_path
    from dulwich.repo import Repo as DulwichRepo

    d = DulwichRepo(str(repo_dir))
    _, tape_id = tree_lookup_path(d.object_store.__getitem__, tree_hex.encode(), b"trace/tape")
    return {e.path: e.sha for e in d.object_store[tape_id].items()}


def test_tape_is_carried_over_and_no_redact_keeps_a_key(run_pf, tmp_path, sandbox):
    run_pf("init", "repo")
    tape_file = tmp_path / "tape.jsonl"
    _jsonl(tape_file, [_exchange(0)])
    run_pf("snapshot", "--fs-root", sandbox, "--tape", tape_file, "--no-redact", "x-api-key", cwd=tmp_path / "repo")
    (sandbox / "f.txt").write_text("changed")
    run_pf("snapshot", "--fs-root", sandbox, cwd=tmp_path / "repo")  # no --tape: the parent's tape stays
    repo = Repo.open(tmp_path / "repo")
    [kept] = tape.read(repo.git, repo.resolve("main").tree)
    assert kept["request"]["headers"] == {"Authorization": "<redacted>", "x-api-key": "k3y-123456789"}
    assert repo.resolve("main").manifest["layers"]["tape"] == {"exchanges": 1}


def test_forks_that_append_exchanges_merge_into_their_union(repo, tmp_path, sandbox):
    repo.snapshot(sandbox, name="main", layers=(tape.TapeInput([_exchange(0)]),))
    [a, b] = repo.fork("main", 2, prefix="try")
    repo.snapshot(sandbox, name=a.name, layers=(tape.TapeInput([_exchange(0), _exchange(1, side="a")]),),
                  allow_empty=True)
    repo.snapshot(sandbox, name=b.name, layers=(tape.TapeInput([_exchange(0), _exchange(1, side="b")]),),
                  allow_empty=True)
    repo.merge(a.name, into="main")
    result = repo.merge(b.name, into="main")
    assert result.status == "merged", result
    merged = repo.resolve("main")
    sides = sorted(x.get("side", "-") for x in tape.read(repo.git, merged.tree))
    assert sides == ["-", "a", "b"]
    assert merged.manifest["layers"]["tape"] == {"exchanges": 3}


def test_process_table_captured_from_proc(run_pf, tmp_path, sandbox):
    child = subprocess.Popen([sys.executable, "-c", "import time, subprocess, sys;"
                              "p = subprocess.Popen(['sleep', '30']); time.sleep(30)"], cwd=sandbox)
    try:
        deadline = time.time() + 10
        while time.time() < deadline and not any(
                open(f"/proc/{p}/cmdline", "rb").read().startswith(b"sleep")
                for p in os.listdir("/proc") if p.isdigit() and _ppid(p) == child.pid):
            time.sleep(0.05)
        run_pf("init", "repo")
        run_pf("snapshot", "--fs-root", sandbox, "--capture-procs", child.pid, cwd=tmp_path / "repo")
    finally:
        child.kill()
        child.wait()
    run_pf("checkout", "main", "--into", tmp_path / "co", "--layers", "env", cwd=tmp_path / "repo")
    table = json.loads((tmp_path / "co" / "world" / "procs.json").read_text())
    assert table["schema"] == 1 and table["root"] == child.pid
    root, sleeper = table["processes"]
    assert root["pid"] == child.pid and root["argv"][0] == sys.executable and root["cwd"] == str(sandbox)
    assert sleeper["ppid"] == child.pid and sleeper["argv"] == ["sleep", "30"]
    assert set(root) == set(procs.FIELDS)
    shown = json.loads(run_pf("show", "main", "--json", cwd=tmp_path / "repo").stdout)
    assert shown["manifest"]["layers"]["procs"] == {"processes": 2}


def _ppid(pid: str) -> int:
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("PPid:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1


def test_process_table_from_file_is_canonical_and_merges_by_side(repo, tmp_path, sandbox):
    table = tmp_path / "procs.json"
    table.write_text(json.dumps([{"pid": 9, "ppid": 1, "argv": ["b"]}, {"pid": 3, "ppid": 1, "argv": ["a"]}]))
    first = repo.snapshot(sandbox, name="main", layers=(procs.ProcsInput(procs.read_input(table)),))
    again = repo.snapshot(sandbox, name="other", layers=(procs.ProcsInput(procs.read_input(table)),))
    assert first.image.tree == again.image.tree  # the same table gives the same bytes
    [fork] = repo.fork("main", 1, prefix="f")
    table.write_text(json.dumps({"processes": [{"pid": 3, "ppid": 1, "argv": ["a"]}]}))
    repo.snapshot(sandbox, name=fork.name, layers=(procs.ProcsInput(procs.read_input(table)),), allow_empty=True)
    (sandbox / "g.txt").write_text("main moves on")
    repo.snapshot(sandbox, name="main")
    assert repo.merge(fork.name, into="main").status == "merged"
    merged = repo.resolve("main")
    assert merged.manifest["layers"]["procs"] == {"processes": 1}


@pytest.mark.parametrize("args,needle", [
    (["--procs", "missing.json"], "--procs: no such file"),
    (["--capture-procs", "999999999"], "no process with pid 999999999"),
    (["--procs", "p.json", "--capture-procs", "1"], "cannot be used together"),
    (["--tape", "bad.jsonl"], "bad.jsonl:2: not valid JSON"),
])
def test_bad_tape_and_procs_input_is_one_line(run_pf, tmp_path, sandbox, args, needle):
    run_pf("init", "repo")
    (tmp_path / "repo" / "p.json").write_text("[]")
    (tmp_path / "repo" / "bad.jsonl").write_text('{"a": 1}\n{oops\n')
    proc = run_pf("snapshot", "--fs-root", sandbox, *args, cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and needle in proc.stderr, proc.stderr
    assert subprocess.run(["git", "for-each-ref", "refs/pf/heads"], cwd=tmp_path / "repo",
                          capture_output=True, text=True).stdout == ""
