"""Revisions, branches, tags, forks, log, diff, effects chain and env redaction."""
from __future__ import annotations

import json

import pygit2
import pytest

from git_pf.layers.effects import ledger as effects
from git_pf.core.errors import InputFormatError, UnknownRevision, UsageError


def _sandbox(tmp_path, **files):
    sb = tmp_path / "sb"
    sb.mkdir(exist_ok=True)
    for name, text in files.items():
        (sb / name).write_text(text)
    return sb


def _three(repo, tmp_path):
    sb = _sandbox(tmp_path, a="1")
    ids = [repo.snapshot(sb, name="main", message="one").image.id]
    (sb / "a").write_text("2")
    ids.append(repo.snapshot(sb, name="main", message="two").image.id)
    (sb / "b").write_text("3")
    ids.append(repo.snapshot(sb, name="main", message="three").image.id)
    return sb, ids


def test_revisions(repo, tmp_path):
    _, ids = _three(repo, tmp_path)
    assert repo.resolve("main").id == ids[2]
    assert repo.resolve("HEAD").id == ids[2]
    assert repo.resolve("main~1").id == ids[1]
    assert repo.resolve("main~2").id == ids[0]
    assert repo.resolve("main^").id == ids[1]
    assert repo.resolve("main^^").id == ids[0]
    assert repo.resolve(ids[1][:7]).id == ids[1]
    assert repo.resolve("refs/pf/heads/main~1").id == ids[1]
    # a two-parent image: ^2 is the second parent
    git = repo.git
    c1, c2 = git[ids[1]], git[ids[2]]
    sig = pygit2.Signature("t", "t@t")
    merge = str(git.create_commit(None, sig, sig, "merge\n", c2.tree_id, [c2.id, c1.id]))
    git.references.create("refs/pf/heads/m", merge)
    assert repo.resolve("m^2").id == ids[1]
    assert repo.resolve("m^1").id == ids[2]
    for bad in ("nope", "main~3", "m^3", "main~x", "zzzz"):
        with pytest.raises(UnknownRevision):
            repo.resolve(bad)


def test_branch_tag_and_log(repo, tmp_path):
    _, ids = _three(repo, tmp_path)
    repo.create_tag("v1", "main~1")
    repo.create_branch("retry", "main~2")
    refs = {(e.kind, e.name): e.id for e in repo.refs()}
    assert refs == {("branch", "main"): ids[2], ("branch", "retry"): ids[0], ("tag", "v1"): ids[1]}
    assert [i.id for i in repo.log("main")] == ids[::-1]
    assert [i.subject for i in repo.log("v1")] == ["two", "one"]
    with pytest.raises(UsageError):
        repo.delete_branch("main")  # the current branch
    repo.delete_branch("retry")
    with pytest.raises(UsageError):
        repo.create_tag("v1", "main")


def test_fork_makes_distinct_images_sharing_trees(repo, tmp_path):
    _, ids = _three(repo, tmp_path)
    forks = repo.fork("main", 5, explore="try the other parser")
    assert [f.name for f in forks] == [f"main-fork-{i}" for i in range(1, 6)]
    assert len({f.id for f in forks}) == 5
    source = repo.resolve("main")
    images = [repo.resolve(f.name) for f in forks]
    assert all(i.parents == (source.id,) for i in images)
    assert len({i.tree for i in images}) == 1  # forks share their whole tree...
    world = lambda image: repo.git[image.tree]["world"].id
    assert {world(i) for i in images} == {world(source)}  # ...and every layer tree with the source
    assert images[0].manifest["label"] == "try the other parser"
    assert images[2].trailer("Pf-Fork") == [f"{source.id} 3/5"]
    more = repo.fork("main", 2)  # numbering continues
    assert [f.name for f in more] == ["main-fork-6", "main-fork-7"]


def test_diff_per_layer(repo, tmp_path):
    sb = _sandbox(tmp_path, keep="k", change="1", drop="d")
    msgs = [{"role": "user", "content": "go"}]
    repo.snapshot(sb, name="main", messages=msgs, env={"A": "1", "B": "2"})
    (sb / "change").write_text("2")
    (sb / "drop").unlink()
    (sb / "new").write_text("n")
    ledger = [{"ts": 1, "tool": "sh", "args_hash": "a", "result_hash": "r", "idempotency_key": "k1",
               "side_effect_class": "idempotent"}]
    repo.snapshot(sb, name="main", messages=msgs + [{"role": "assistant", "content": "done"}],
                  effects=ledger, env={"A": "1", "B": "3", "C": "4"})
    d = repo.diff("main~1", "main")
    assert (d.world.added, d.world.changed, d.world.removed) == (["new"], ["change"], ["drop"])
    assert (d.trace.appended, d.trace.rewritten) == (1, False)
    assert (d.effects.added, d.effects.removed) == (1, 0)
    assert (d.env.added, d.env.changed, d.env.removed) == (["C"], ["B"], [])
    assert repo.diff("main", "main").empty


def test_layers_not_given_are_inherited(repo, tmp_path):
    sb = _sandbox(tmp_path, a="1")
    msgs = [{"role": "user", "content": "hi"}]
    repo.snapshot(sb, name="main", messages=msgs, env={"X": "1"}, agent="coder/2")
    (sb / "a").write_text("2")
    second = repo.snapshot(sb, name="main")
    assert json.loads(repo.read_layer("main", "trace/messages.jsonl")) == msgs[0]
    assert second.image.manifest["agent"]["kind"] == "coder"
    assert json.loads(repo.read_layer("main", "world/env.json"))["env"] == {"X": "1"}


def test_effects_are_chained_and_checked(repo, tmp_path):
    sb = _sandbox(tmp_path, a="1")
    entries = [{"ts": "2026-01-01T00:00:0%dZ" % i, "tool": "http.post", "args": {"n": i}, "result": "ok",
                "idempotency_key": f"k{i}", "side_effect_class": "irreversible"} for i in range(3)]
    repo.snapshot(sb, name="main", effects=entries)
    stored = effects.decode(repo.read_layer("main", "effects/ledger.jsonl"))
    assert stored[0]["prev"] is None
    assert stored[1]["prev"] == effects.entry_hash(stored[0]) and stored[2]["prev"] == effects.entry_hash(stored[1])
    assert stored[0]["args_hash"] == effects.value_hash({"n": 0})
    assert effects.verify(stored) == []
    # a chained ledger is accepted as input; a broken one is an error naming the line
    assert effects.chain(stored, "x") == stored
    broken = [dict(e) for e in stored]
    broken[2]["prev"] = "0" * 64
    with pytest.raises(InputFormatError, match=r"x:3: effects chain broken"):
        effects.chain(broken, "x")
    bad_class = [dict(entries[0], side_effect_class="maybe")]
    with pytest.raises(InputFormatError, match="x:1"):
        effects.chain(bad_class, "x")
    tampered = [dict(e) for e in stored]
    tampered.pop(1)  # a deleted entry is detected
    assert effects.verify(tampered) != []


def test_env_redaction(repo, tmp_path):
    sb = _sandbox(tmp_path, a="1")
    env = {"OPENAI_API_KEY": "sk-proj-abcdefghijk", "GITHUB_TOKEN": "x", "DB_PASSWORD": "p",
           "AWS_CREDENTIALS": "c", "AUTH": "Bearer abcdefghijklmnop", "DB_URL": "postgres://u:hunter2@db/x",
           "PATH": "/usr/bin", "KEEP_KEY": "visible"}
    repo.snapshot(sb, name="main", env=env, no_redact={"KEEP_KEY"})
    stored = json.loads(repo.read_layer("main", "world/env.json"))
    assert stored["env"]["PATH"] == "/usr/bin" and stored["env"]["KEEP_KEY"] == "visible"
    assert sorted(stored["redacted"]) == ["AUTH", "AWS_CREDENTIALS", "DB_PASSWORD", "DB_URL", "GITHUB_TOKEN",
                                          "OPENAI_API_KEY"]
    assert all(stored["env"][k] == "<redacted>" for k in stored["redacted"])
    assert b"hunter2" not in repo.read_layer("main", "world/env.json")


def test_fork_of_head_is_named_after_the_current_branch(repo, tmp_path):
    _three(repo, tmp_path)
    assert [f.name for f in repo.fork("HEAD", 2)] == ["main-fork-1", "main-fork-2"]
    assert repo.fork("main~1", 1)[0].name.startswith("fork-")
