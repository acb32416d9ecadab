"""Trace, effects and env merge rules, merges of merges, self-merges and fast-forwards."""
from __future__ import annotations

import json
import subprocess

import pytest

from git_pf.layers.effects import ledger as ledger_fmt
from git_pf.layers.trace import messages as trace_fmt
from git_pf.core.errors import UsageError
from merge_helpers import snap

U = {"role": "user", "content": "task"}


def _fx(key, ts, tool="http_get", args="a", cls="idempotent"):
    return {"ts": ts, "tool": tool, "args": args, "result": "ok", "idempotency_key": key, "side_effect_class": cls}


def _messages(repo, rev="main"):
    return trace_fmt.decode(repo.read_layer(rev, "trace/messages.jsonl"))


def _ledger(repo, rev="main"):
    return ledger_fmt.decode(repo.read_layer(rev, "effects/ledger.jsonl"))


def test_self_merge_and_merging_an_ancestor_are_noops(repo):
    base = snap(repo, "main", {"a": "1\n"})
    tip = snap(repo, "main", {"a": "2\n"})
    refs_before = repo.refs()
    for rev in ("main", base.id):
        result = repo.merge(rev, into="main")
        assert result.status == "up-to-date" and result.clean and result.image is None
    assert repo.refs() == refs_before and repo.resolve("main").id == tip.id


def test_fast_forward_unless_no_ff(repo):
    base = snap(repo, "main", {"a": "1\n"})
    repo.create_branch("ff", base.id)
    repo.create_branch("noff", base.id)
    fork = snap(repo, "ff", {"a": "2\n"})
    result = repo.merge("ff", into="main", dry_run=True)
    assert result.status == "fast-forward" and repo.resolve("main").id == base.id
    result = repo.merge("ff", into="main")
    assert result.status == "fast-forward" and repo.resolve("main").id == fork.id
    later = snap(repo, "ff", {"a": "3\n"}, messages=[U, {"role": "assistant", "content": "done"}])
    merged = repo.merge("ff", into="noff", no_ff=True)
    assert merged.status == "merged" and merged.image.parents == (base.id, later.id)
    assert merged.image.tree == later.tree  # ours had nothing new: every layer is theirs, no merge message
    assert repo.read_layer("noff", "world/fs/a") == b"3\n"
    assert repo.read_layer("noff", "trace/messages.jsonl") == repo.read_layer("ff", "trace/messages.jsonl")


def test_merge_of_merges_summarises_only_what_is_new(repo):
    base = snap(repo, "main", {"a": "a\n", "b": "b\n"}, messages=[U])
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"a": "a2\n", "b": "b\n"}, messages=[U, {"role": "assistant", "content": "main 1"}],
         effects=[_fx("k-main-1", "2026-01-01T00:00:02Z")])
    f1 = snap(repo, "fork", {"a": "a\n", "b": "b2\n"}, messages=[U, {"role": "assistant", "content": "fork 1"}],
              effects=[_fx("k-fork-1", "2026-01-01T00:00:01Z")])
    m1 = repo.merge("fork", into="main").image
    assert m1.parents[1] == f1.id
    assert [e["idempotency_key"] for e in _ledger(repo)] == ["k-main-1", "k-fork-1"]  # ours, then theirs' new
    assert ledger_fmt.verify(_ledger(repo)) == []
    # both lines go on; the second merge's ancestor is the fork tip merged before
    main_msgs = _messages(repo) + [{"role": "assistant", "content": "main 2"}]
    snap(repo, "main", {"a": "a3\n", "b": "b2\n"}, messages=main_msgs,
         effects=_ledger(repo) + [_fx("k-main-2", "2026-01-01T00:00:05Z")])
    fork_msgs = _messages(repo, "fork") + [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "fork 2"}]
    snap(repo, "fork", {"a": "a\n", "b": "b2\n", "c": "c\n"}, messages=fork_msgs,
         effects=[_fx("k-fork-1", "2026-01-01T00:00:01Z"), _fx("k-fork-2", "2026-01-01T00:00:03Z")])
    result = repo.merge("fork", into="main")
    assert result.clean and result.bases == [f1.id]
    trace = next(r for r in result.layers if r.layer == "trace")
    assert trace.report["summarized_messages"] == 2
    msgs = _messages(repo)
    assert msgs[:-1] == main_msgs and msgs[-1]["content"].endswith("fork 2")
    assert [e["idempotency_key"] for e in _ledger(repo)] == ["k-main-1", "k-fork-1", "k-main-2", "k-fork-2"]
    assert repo.read_layer("main", "world/fs/a") == b"a3\n" and repo.read_layer("main", "world/fs/c") == b"c\n"
    assert len(repo.log("main", first_parent=True)) == 5


def test_non_utf8_trace_text_survives_and_is_cut_on_a_character_boundary(repo, tmp_path, run_pf):
    base = snap(repo, "main", {"a": "1\n"}, messages=[U])
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"a": "1\n"}, messages=[U, {"role": "assistant", "content": "ours"}])
    raw = b'{"role":"user","content":"task"}\n{"role":"assistant","content":"caf\xc3\xa9 \xff\xfe bytes ' \
          + "é".encode() * 3000 + b'"}\n'
    (tmp_path / "m.jsonl").write_bytes(raw)
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (sandbox / "a").write_text("1\n")
    run_pf("snapshot", "--fs-root", sandbox, "--name", "fork", "--messages", tmp_path / "m.jsonl",
           cwd=tmp_path / "repo")
    proc = run_pf("merge", "fork", "--into", "main", "--json", cwd=tmp_path / "repo")
    report = json.loads(proc.stdout)
    assert report["status"] == "merged"
    last = _messages(repo)[-1]["content"]
    summary = last.split("Its outcome:\n", 1)[1]
    data = summary.encode("utf-8", "surrogateescape")
    assert data.startswith(b"caf\xc3\xa9 \xff\xfe bytes ")  # the undecodable bytes are kept as they were
    assert len(data) <= 4096 and data.decode("utf-8", "surrogateescape").endswith("é")
    assert len(data) > 4090


def test_pluggable_summariser_gets_new_messages_as_jsonl(repo, tmp_path):
    script = tmp_path / "summ.py"
    script.write_text("import sys, json\nlines = [json.loads(l) for l in sys.stdin]\n"
                      "open(sys.argv[1], 'a').write('ran\\n')\n"
                      "print(f'{len(lines)} new, last role {lines[-1][\"role\"]}')\n")
    marker = tmp_path / "ran.txt"
    subprocess.run(["git", "config", "pf.summarizer", f"python3 {script} {marker}"], cwd=repo.git_dir, check=True)
    base = snap(repo, "main", {"a": "1\n"}, messages=[U])
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"a": "1\n"}, messages=[U, {"role": "assistant", "content": "o"}])
    snap(repo, "fork", {"a": "1\n"}, messages=[U, {"role": "tool", "content": "t"}, {"role": "assistant", "content": "x"}])
    dry = repo.merge("fork", into="main", dry_run=True)
    assert dry.clean and not marker.exists()  # a dry run never calls the summariser
    result = repo.merge("fork", into="main")
    assert marker.read_text() == "ran\n"
    assert _messages(repo)[-1]["content"].endswith("2 new, last role assistant")
    trace = next(r for r in result.layers if r.layer == "trace")
    assert trace.report["summarizer"].startswith("python3")


def test_rewritten_trace_is_a_conflict(repo):
    base = snap(repo, "main", {"a": "1\n"}, messages=[U, {"role": "assistant", "content": "v1"}])
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"a": "1\n"}, messages=[U, {"role": "assistant", "content": "v1"}, U])
    snap(repo, "fork", {"a": "1\n"}, messages=[U, {"role": "assistant", "content": "rewritten"}])
    result = repo.merge("fork", into="main")
    assert result.status == "conflict"
    trace = next(r for r in result.layers if r.layer == "trace")
    assert "not a prefix of theirs" in trace.conflicts[0]
    resolved = repo.merge("fork", into="main", prefer={"trace": "theirs"})
    assert resolved.clean and _messages(repo)[-1]["content"] == "rewritten"


def test_effects_duplicated_on_both_sides(repo, run_pf, tmp_path):
    base = snap(repo, "main", {"a": "1\n"}, effects=[_fx("k0", 1)])
    repo.create_branch("fork", base.id)
    send = lambda key, ts: _fx(key, ts, tool="send_email", args={"to": "x@y"}, cls="irreversible")  # noqa: E731
    ours = snap(repo, "main", {"a": "1\n"}, effects=[_fx("k0", 1), send("mail-ours", 3), _fx("k-o", 4)])
    snap(repo, "fork", {"a": "1\n"}, effects=[_fx("k0", 1), send("mail-theirs", 2)])
    proc = run_pf("merge", "fork", "--into", "main", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 1
    assert "irreversible 'send_email' done on both sides" in proc.stdout
    assert repo.resolve("main").id == ours.id
    proc = run_pf("merge", "fork", "--into", "main", "--accept-duplicate-effects", "--json", cwd=tmp_path / "repo")
    report = json.loads(proc.stdout)
    effects = next(layer for layer in report["layers"] if layer["layer"] == "effects")
    assert effects["duplicates"] == [{"tool": "send_email", "args_hash": ledger_fmt.value_hash({"to": "x@y"}),
                                      "ours_key": "mail-ours", "theirs_key": "mail-theirs"}]
    ledger = _ledger(repo)
    assert [e["idempotency_key"] for e in ledger] == ["k0", "mail-ours", "k-o", "mail-theirs"]
    assert ledger_fmt.verify(ledger) == []
    assert repo.resolve("main").manifest["layers"]["effects"] == {"entries": 4, "irreversible": 2}


def test_env_key_wise_and_conflicts(repo):
    base = snap(repo, "main", {"a": "1\n"}, env={"A": "1", "B": "1", "C": "1"})
    repo.create_branch("fork", base.id)
    snap(repo, "main", {"a": "1\n"}, env={"A": "2", "B": "1", "C": "1", "API_KEY": "sk-abcdefghijklmnop"})
    snap(repo, "fork", {"a": "1\n"}, env={"A": "1", "B": "3"})
    result = repo.merge("fork", into="main")
    assert result.clean
    env = json.loads(repo.read_layer("main", "world/env.json"))
    assert env["env"] == {"A": "2", "B": "3", "API_KEY": "<redacted>"} and env["redacted"] == ["API_KEY"]
    repo.create_branch("f2", base.id)
    snap(repo, "f2", {"a": "1\n"}, env={"A": "9", "B": "1", "C": "1"})
    clash = repo.merge("f2", into="main")
    env_layer = next(r for r in clash.layers if r.layer == "env")
    assert clash.status == "conflict" and env_layer.report["conflicting_keys"] == ["A"]


class _Layer:
    """A plug-in layer as a snapshot writes it: files under its own top-level directory."""

    def __init__(self, name: str, content: str):
        self.name, self.content = name, content

    def write(self, repo, edit, parent) -> dict:
        edit.put_file(f"{self.name}/state.json".encode(), self.content.encode())
        return {"content": self.content}


def test_plugin_layer_without_its_merger_merges_by_side(repo, monkeypatch):
    from git_pf.merge import layer

    monkeypatch.setitem(layer.PLUGINS, "model", "git_pf.no_such_module:Merger")  # the extra is not installed
    base = snap(repo, "main", {"a": "1\n"}, layers=(_Layer("model", "v0"),))
    repo.create_branch("fork", base.id)
    repo.create_branch("fork2", base.id)
    snap(repo, "main", {"a": "2\n"}, layers=(_Layer("model", "v0"),))
    snap(repo, "fork", {"a": "1\n"}, layers=(_Layer("model", "theirs"),))
    taken = repo.merge("fork", into="main")
    assert taken.clean and repo.read_layer("main", "model/state.json") == b"theirs"
    assert taken.image.manifest["layers"]["model"] == {"content": "theirs"} and "model theirs" in taken.image.trailer("Pf-Merge")
    snap(repo, "fork2", {"a": "1\n"}, layers=(_Layer("model", "other"),))
    clash = repo.merge("fork2", into="main")
    model = next(r for r in clash.layers if r.layer == "model")
    assert clash.status == "conflict" and "pip install 'git-pf[model]'" in model.conflicts[0]
    assert repo.merge("fork2", into="main", prefer={"model": "theirs"}).clean
    assert repo.read_layer("main", "model/state.json") == b"other"


def test_unrelated_images_need_the_flag(repo):
    snap(repo, "main", {"a": "1\n", "shared": "x\n"})
    snap(repo, "island", {"b": "2\n", "shared": "y\n"})
    with pytest.raises(UsageError, match="unrelated"):
        repo.merge("island", into="main")
    result = repo.merge("island", into="main", allow_unrelated=True)
    assert result.status == "conflict" and result.bases == []  # add/add on 'shared'
    snap(repo, "island", {"b": "2\n", "shared": "x\n"})
    ok = repo.merge("island", into="main", allow_unrelated=True)
    assert ok.clean and repo.read_layer("main", "world/fs/b") == b"2\n"
