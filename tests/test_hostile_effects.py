"""The effects ledger only grows along first-parent history: images forged with plain git
plumbing that drop, edit or re-chain entries, or record an irreversible effect twice, are
reported by fsck; snapshot refuses them; merge never loses or doubles an effect."""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from git_pf.layers.effects import ledger as ledger_fmt
from merge_helpers import snap


def _fx(key, ts, tool="http_get", args="a", cls="idempotent"):
    return {"ts": ts, "tool": tool, "args": args, "result": "ok", "idempotency_key": key, "side_effect_class": cls}


def _send(key, ts):
    return _fx(key, ts, tool="send_email", args={"to": "x@y"}, cls="irreversible")


def _ledger(repo, rev="main"):
    return ledger_fmt.decode(repo.read_layer(rev, "effects/ledger.jsonl") or b"")


def _git(repo, *args, data=None, env=None):
    full = dict(os.environ, GIT_AUTHOR_NAME="m", GIT_AUTHOR_EMAIL="m@x", GIT_COMMITTER_NAME="m",
                GIT_COMMITTER_EMAIL="m@x", **(env or {}))
    return subprocess.run(["git", *args], cwd=repo.git_dir, input=data, capture_output=True, env=full,
                          check=True).stdout.decode().strip()


def forge(repo, branch, ledger: bytes, message="forged") -> str:
    """A new image on ``branch`` whose ledger is ``ledger``, everything else as its parent,
    made with git plumbing only (read-tree, hash-object, update-index, commit-tree)."""
    parent = _git(repo, "rev-parse", f"refs/pf/heads/{branch}")
    env = {"GIT_INDEX_FILE": str(repo.git_dir / "forge-index")}
    _git(repo, "read-tree", f"{parent}^{{tree}}", env=env)
    blob = _git(repo, "hash-object", "-w", "--stdin", data=ledger)
    _git(repo, "update-index", "--cacheinfo", f"100644,{blob},effects/ledger.jsonl", env=env)
    tree = _git(repo, "write-tree", env=env)
    os.unlink(repo.git_dir / "forge-index")
    commit = _git(repo, "commit-tree", tree, "-p", parent, "-m", message)
    _git(repo, "update-ref", f"refs/pf/heads/{branch}", commit, parent)
    return commit


def _fsck(run_pf, repo):
    proc = run_pf("fsck", cwd=repo.git_dir, check=False)
    return proc.returncode, [line for line in proc.stdout.splitlines() if line.startswith("error:")]


def test_dropping_the_parents_last_entry_is_reported_by_fsck(repo, run_pf):
    snap(repo, "main", {"a": "1\n"}, effects=[_fx("k1", 1), _fx("k2", 2)])
    stored = _ledger(repo)
    forged = forge(repo, "main", ledger_fmt.encode(ledger_fmt.chain([stored[0], _fx("k3", 3)], "x")))
    assert ledger_fmt.verify(_ledger(repo)) == []  # the chain alone is sound: only history shows the loss
    code, problems = _fsck(run_pf, repo)
    assert code == 1 and len(problems) == 1
    assert forged[:12] in problems[0] and "entry 2 ('k2') differs" in problems[0]


def _edit_last(stored):
    edited = [dict(e) for e in stored]
    edited[-1]["result_hash"] = "0" * 64  # the last entry is linked by nothing: its chain stays sound
    return edited


def _rechain(stored):
    return ledger_fmt.chain([dict({k: v for k, v in e.items() if k != "prev"}, result_hash=f"{i}" * 64)
                             for i, e in enumerate(stored)], "x")


@pytest.mark.parametrize("rewrite, expect", [
    (_edit_last, "entry 3 ('k3') differs"),
    (lambda stored: stored[:-1], "entry 3 ('k3') is missing"),
    (_rechain, "entry 1 ('k1') differs"),
], ids=["edit-last", "drop-last", "rewrite-and-rechain"])
def test_rewritten_ledger_is_reported_by_fsck(repo, run_pf, rewrite, expect):
    snap(repo, "main", {"a": "1\n"}, effects=[_fx("k1", 1), _fx("k2", 2), _fx("k3", 3)])
    code, _ = _fsck(run_pf, repo)
    assert code == 0
    forged = forge(repo, "main", ledger_fmt.encode(rewrite(_ledger(repo))))
    code, problems = _fsck(run_pf, repo)
    assert code == 1 and len(problems) == 1
    assert problems[0].startswith(f"error: image {forged[:12]}: effects ledger does not extend its first parent")
    assert expect in problems[0]


def test_same_irreversible_effect_twice_is_reported_by_fsck_and_refused_by_snapshot(repo, run_pf, tmp_path):
    snap(repo, "main", {"a": "1\n"})
    twice = ledger_fmt.chain([_send("mail-1", 1), _fx("k2", 2), _send("mail-1", 3)], "x")
    forged = forge(repo, "main", ledger_fmt.encode(twice))
    snap(repo, "main", {"a": "2\n"})  # inherits the ledger: reported once, where the repeat appears
    code, problems = _fsck(run_pf, repo)
    assert code == 1
    assert problems == [f"error: image {forged[:12]}: effects: irreversible effect 'mail-1' recorded twice "
                        f"(entries 1 and 3)"]

    (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in twice))
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    before = repo.resolve("main").id
    for extra in ([], ["--rewrite-effects"]):
        proc = run_pf("snapshot", "--fs-root", sandbox, "--effects", tmp_path / "e.jsonl", *extra,
                      cwd=repo.git_dir, check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
        assert "irreversible effect 'mail-1' is recorded twice (entries 1 and 3)" in proc.stderr
    assert repo.resolve("main").id == before


def test_snapshot_refuses_a_ledger_that_does_not_extend_the_parents_unless_rewrite(repo, run_pf, tmp_path):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()

    def snapshot(entries, *extra, check=True):
        (tmp_path / "e.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries))
        return run_pf("snapshot", "--fs-root", sandbox, "--effects", tmp_path / "e.jsonl", "--allow-empty", *extra,
                      cwd=repo.git_dir, check=check)

    snapshot([_fx("k1", 1), _fx("k2", 2)])
    snapshot([_fx("k1", 1), _fx("k2", 2), _fx("k3", 3)])  # an extension needs nothing
    assert repo.resolve("main").trailer(ledger_fmt.REWRITE_TRAILER) == []
    before = repo.resolve("main").id
    proc = snapshot([_fx("k1", 1), _fx("k3", 3)], check=False)
    assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    assert "not an extension of the parent image's ledger: entry 2 ('k2') differs" in proc.stderr
    assert repo.resolve("main").id == before

    proc = snapshot([_fx("k1", 1), _fx("k3", 3)], "--rewrite-effects", "--rewrite-reason", "k2 was\nnever sent")
    shown = json.loads(run_pf("show", "--json", cwd=repo.git_dir).stdout)
    assert [ledger_fmt.REWRITE_TRAILER, "k2 was never sent"] in shown["trailers"]
    assert [e["idempotency_key"] for e in _ledger(repo)] == ["k1", "k3"]
    assert _fsck(run_pf, repo) == (0, [])
    image = repo.snapshot(sandbox, name="main", effects=[_fx("k1", 1)], rewrite_effects=True, allow_empty=True).image
    assert image.trailer(ledger_fmt.REWRITE_TRAILER) == ["yes"]


def _fork(repo, base_effects):
    base = snap(repo, "main", {"a": "1\n"}, effects=base_effects)
    repo.create_branch("fork", base.id)
    return base


def test_fork_rerunning_an_irreversible_base_effect_is_a_conflict(repo, run_pf):
    _fork(repo, [_send("mail-1", 1)])
    ours = snap(repo, "main", {"a": "1\n"}, effects=[_send("mail-1", 1), _fx("k-o", 2)])
    snap(repo, "fork", {"a": "1\n"}, effects=[_send("mail-1", 1), _send("mail-2", 3)])
    refs_before = repo.refs()
    proc = run_pf("merge", "fork", "--into", "main", cwd=repo.git_dir, check=False)
    assert proc.returncode == 1
    assert ("CONFLICT (effects): irreversible 'send_email' done before the fork and again by theirs "
            "(keys 'mail-1' and 'mail-2'" in proc.stdout)
    assert repo.refs() == refs_before and repo.resolve("main").id == ours.id


def test_fork_rerunning_an_irreversible_base_effect_under_its_key_is_always_a_conflict(repo, run_pf):
    _fork(repo, [_send("mail-1", 1)])
    snap(repo, "main", {"a": "1\n"}, effects=[_send("mail-1", 1), _fx("k-o", 2)])
    stored = _ledger(repo, "fork")
    forge(repo, "fork", ledger_fmt.encode(ledger_fmt.chain(stored + [_send("mail-1", 5)], "x")))
    refs_before = repo.refs()
    proc = run_pf("merge", "fork", "--into", "main", "--accept-duplicate-effects", cwd=repo.git_dir, check=False)
    assert proc.returncode == 1
    assert "irreversible 'send_email' re-run by theirs under key 'mail-1'" in proc.stdout
    assert repo.refs() == refs_before


def test_merged_ledger_extends_ours_holds_theirs_and_passes_fsck(repo, run_pf):
    _fork(repo, [_fx("k0", 1)])
    snap(repo, "main", {"a": "1\n"}, effects=[_fx("k0", 1), _fx("k-o", "2026-01-01T00:00:09Z")])
    snap(repo, "fork", {"a": "1\n"}, effects=[_fx("k0", 1), _fx("k-t", "2026-01-01T00:00:01Z"), _send("m", 2)])
    ours, theirs = _ledger(repo, "main"), _ledger(repo, "fork")
    result = repo.merge("fork", into="main")
    assert result.clean
    merged = _ledger(repo)
    assert ledger_fmt.first_difference(ours, merged) is None  # ours' entries, unchanged, come first
    assert [e["idempotency_key"] for e in merged] == ["k0", "k-o", "k-t", "m"]
    bare = lambda e: {k: v for k, v in e.items() if k != "prev"}  # noqa: E731
    assert all(bare(e) in [bare(m) for m in merged] for e in theirs)
    assert repo.resolve("main").manifest["layers"]["effects"] == {"entries": 4, "irreversible": 1}
    assert _fsck(run_pf, repo) == (0, [])


def test_prefer_effects_theirs_that_drops_ours_entries_is_a_conflict(repo, run_pf):
    _fork(repo, [_fx("k0", 1)])
    ours = snap(repo, "main", {"a": "1\n"}, effects=[_fx("k0", 1), _fx("k-o", 2)])
    snap(repo, "fork", {"a": "1\n"}, effects=[_fx("k0", 1), _fx("k-t", 3)])
    proc = run_pf("merge", "fork", "--into", "main", "--prefer", "effects=theirs", cwd=repo.git_dir, check=False)
    assert proc.returncode == 1
    assert "--prefer effects=theirs would drop or change ours' entry 2 ('k-o') differs" in proc.stdout
    assert repo.resolve("main").id == ours.id
    run_pf("merge", "fork", "--into", "main", "--prefer", "effects=ours", cwd=repo.git_dir)
    assert [e["idempotency_key"] for e in _ledger(repo)] == ["k0", "k-o"]


@pytest.mark.parametrize("damage", [b"{not json\n", b"broken-chain"], ids=["unparseable", "broken-chain"])
def test_damaged_ledger_fails_the_merge_with_exit_3(repo, run_pf, damage):
    _fork(repo, [_fx("k0", 1)])
    snap(repo, "main", {"a": "2\n"}, effects=[_fx("k0", 1), _fx("k-o", 2)])
    snap(repo, "fork", {"a": "1\n"}, effects=[_fx("k0", 1), _fx("k-t", 3)])
    if damage == b"broken-chain":
        stored = _ledger(repo, "fork")
        damage = ledger_fmt.encode([stored[1], stored[0]])
    forged = forge(repo, "fork", damage)
    refs_before = repo.refs()
    for prefer in ([], ["--prefer", "effects=ours"]):
        proc = run_pf("merge", "fork", "--into", "main", *prefer, cwd=repo.git_dir, check=False)
        assert proc.returncode == 3 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert forged[:12] in proc.stderr and "Traceback" not in proc.stderr
    assert repo.refs() == refs_before
