"""Every layer is given to ``Repo.snapshot`` the same way, by its name; the first release's
keywords (``messages=``, ``layers=``) still work, give the same image, and warn."""
from __future__ import annotations

import os
import warnings

import pytest

from git_pf import Repo
from git_pf.core.errors import UsageError
from git_pf.layers.trace.tape import TapeInput
from git_pf.layers.world.procs import ProcsInput
from git_pf.ops.snapshot_inputs import EnvInput, TraceInput

MESSAGES = [{"role": "user", "content": "fix the parser"}, {"role": "assistant", "content": "done"}]
TAPE = [{"request": {"model": "m", "messages": MESSAGES[:1]}, "response": {"content": "done"}}]
EFFECTS = [{"ts": 1, "tool": "write", "args": {"p": "a"}, "result": "ok", "idempotency_key": "k1",
            "side_effect_class": "idempotent"}]
PROCS = {"schema": 1, "root": 1, "processes": [{"pid": 1, "ppid": 0, "argv": ["agent"], "cwd": "/", "exe": None,
                                                 "uid": 0}]}


def _repos(tmp_path):
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "a.txt").write_text("a\n")
    return Repo.init(tmp_path / "new")[0], Repo.init(tmp_path / "old")[0], sb


def test_layers_by_name_give_the_image_the_old_keywords_gave_and_only_the_old_ones_warn(tmp_path):
    new, old, sb = _repos(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new spelling warns about nothing
        a = new.snapshot(sb, message="m", trace=TraceInput(messages=MESSAGES, tape=TAPE), effects=EFFECTS,
                         env=EnvInput({"HOME": "/root"}, PROCS))
    with pytest.warns(DeprecationWarning) as caught:
        b = old.snapshot(sb, message="m", messages=MESSAGES, effects=EFFECTS, env={"HOME": "/root"},
                         layers=(TapeInput(TAPE), ProcsInput(PROCS)))
    assert len(caught) == 2 and all("is deprecated" in str(w.message) for w in caught)
    assert "trace=TraceInput(messages=...)" in str(caught[0].message)
    assert a.image.tree == b.image.tree
    for path in ("trace/messages.jsonl", "world/env.json", "world/procs.json", "effects/ledger.jsonl"):
        assert new.read_layer("main", path) is not None


def test_a_part_left_out_is_carried_over(tmp_path):
    repo, _, sb = _repos(tmp_path)
    repo.snapshot(sb, message="1", trace=TraceInput(messages=MESSAGES, tape=TAPE))
    (sb / "b.txt").write_text("b\n")
    second = repo.snapshot(sb, message="2", trace=TraceInput(tape=TAPE + TAPE))
    assert repo.read_layer(second.image.id, "trace/messages.jsonl") == repo.read_layer("main~1", "trace/messages.jsonl")
    assert second.image.manifest["layers"]["tape"] == {"exchanges": 2}


@pytest.mark.parametrize("kwargs, param", [
    ({"trace": MESSAGES}, "trace"),
    ({"env": ["HOME"]}, "env"),
    ({"model": TapeInput(TAPE)}, "model"),
    ({"cache": EnvInput()}, "cache"),
    ({"trace": TraceInput(messages=MESSAGES), "messages": MESSAGES}, "messages"),
])
def test_a_wrong_input_is_one_usage_error_naming_its_parameter(tmp_path, kwargs, param):
    repo, _, sb = _repos(tmp_path)
    with pytest.raises(UsageError) as err:
        repo.snapshot(sb, **kwargs)
    assert err.value.param == param and err.value.message.startswith(f"{param}: ")
    assert repo.current_branch_tip() is None  # nothing was written


def test_a_mount_snapshot_takes_the_same_inputs(tmp_path):
    from mount_helpers import fuse_skip_reason

    if fuse_skip_reason():
        pytest.skip(fuse_skip_reason())
    import subprocess
    import sys

    from git_pf.mount.snapshot import snapshot_mount

    repo, _, sb = _repos(tmp_path)
    first = repo.snapshot(sb, message="1")
    mnt = tmp_path / "mnt"
    env = dict(os.environ, GIT_DIR=str(repo.git_dir), PATH=f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}")
    subprocess.run(["git-pf", "mount", first.image.id, str(mnt), "--rw"], check=True, env=env,
                   cwd=tmp_path / "new", capture_output=True)
    try:
        (mnt / "c.txt").write_text("c\n")
        result = snapshot_mount(repo, mnt, name="main", trace=TraceInput(messages=MESSAGES), effects=EFFECTS)
        assert repo.read_layer(result.image.id, "world/fs/c.txt") == b"c\n"
        assert repo.read_layer(result.image.id, "trace/messages.jsonl").count(b"\n") == 2
    finally:
        subprocess.run(["git-pf", "umount", str(mnt)], env=env, cwd=tmp_path / "new", capture_output=True)
