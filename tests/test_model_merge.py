"""Model layer merges: three-way in ``git pf merge`` (the ModelMerger plug-in) and N-way
``git pf model-merge``, on real peft adapters that load and run afterwards."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from git_pf.core.errors import UsageError
from git_pf.merge.layer import MergeContext
from git_pf.layers.model.layer import ModelInput
from git_pf.layers.model.merge import ModelMerger
from git_pf.layers.model.model_merge import model_merge
from git_pf.layers.model.options import MergeSpec
from git_pf.layers.model.state import ADAPTER, BASE, read_state

from model_helpers import WEIGHTS, commit_merge, logits, make_adapter, sandbox, train

pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def snap(repo, tmp_path, branch, text="x\n", **model):
    layers = (ModelInput.prepare(**model),) if model else ()
    return repo.snapshot(sandbox(tmp_path, "sb-" + branch, text), name=branch, layers=layers).image


@pytest.fixture
def forked(repo, tmp_path):
    """main: an adapter A0; two branches forked from it."""
    a0 = make_adapter(tmp_path / "a0")
    root = snap(repo, tmp_path, "main", adapter=a0, base_model="tiny@v1")
    repo.create_branch("ours", root.id)
    repo.create_branch("theirs", root.id)
    return a0, root


def ctx(repo, base, ours, theirs, **options):
    return MergeContext(repo, base, ours, theirs, {f"model.{k}": v for k, v in options.items()})


def checkout_model(repo, image, dest):
    repo.checkout(image.id, dest, layers=("model",))
    return dest


def test_only_one_side_trained_gives_that_side(repo, tmp_path, forked):
    a0, root = forked
    theirs = snap(repo, tmp_path, "theirs", adapter=train(a0, tmp_path / "t", seed=5))
    ours = snap(repo, tmp_path, "ours", text="world change\n")
    result = ModelMerger().merge(ctx(repo, root, ours, theirs, method="ties", density=0.5))
    assert result.clean and result.trailer == "model theirs"  # nothing was merged numerically
    assert result.report["parts"]["adapter"] == "theirs" and result.report["resolution"] == "theirs"
    merged = commit_merge(repo, ours, theirs, result, "m1")
    assert read_state(repo.git, merged.tree) == read_state(repo.git, theirs.tree)
    out = checkout_model(repo, merged, tmp_path / "out")
    assert (out / WEIGHTS).read_bytes() == (tmp_path / "t" / WEIGHTS).read_bytes()

    # the other way round: ours trained, theirs did not -> ours, no change at all
    back = ModelMerger().merge(ctx(repo, root, theirs, ours))
    assert back.clean and back.changes == {}


def test_both_trained_merges_per_module_and_loads_in_peft(repo, tmp_path, forked):
    a0, root = forked
    t_dir = train(a0, tmp_path / "t", seed=5, only="layers.1.")
    o_dir = train(a0, tmp_path / "o", seed=6, only="layers.0.")
    theirs = snap(repo, tmp_path, "theirs", adapter=t_dir)
    ours = snap(repo, tmp_path, "ours", adapter=o_dir)
    result = ModelMerger().merge(ctx(repo, root, ours, theirs, method="ties", density=0.5, seed=3))
    assert result.clean, result.conflicts
    report = result.report["adapter"]
    assert report["method"] == "ties" and report["seed"] == 3 and report["modules"] == {"ours": 2, "theirs": 2}
    assert report["error"] == 0.0  # every module came whole from one side
    assert result.trailer.startswith("model ties seed=3 density=0.5")
    merged = commit_merge(repo, ours, theirs, result, "m2")
    assert merged.manifest is not None and merged.trailer("Pf-Merge") == [result.trailer]
    out = load_file(str(checkout_model(repo, merged, tmp_path / "out") / WEIGHTS))
    o, t = load_file(str(o_dir / WEIGHTS)), load_file(str(t_dir / WEIGHTS))
    for name, value in out.items():
        assert torch.equal(value, o[name] if "layers.0." in name else t[name]), name
    assert torch.isfinite(logits(tmp_path / "out")).all()


def test_both_trained_the_same_modules_is_seeded_and_reproducible(repo, tmp_path, forked):
    a0, root = forked
    theirs = snap(repo, tmp_path, "theirs", adapter=train(a0, tmp_path / "t", seed=5))
    ours = snap(repo, tmp_path, "ours", adapter=train(a0, tmp_path / "o", seed=6))
    first = ModelMerger().merge(ctx(repo, root, ours, theirs, method="dare_ties", drop=0.3, seed=7))
    again = ModelMerger().merge(ctx(repo, root, ours, theirs, method="dare_ties", drop=0.3, seed=7))
    other = ModelMerger().merge(ctx(repo, root, ours, theirs, method="dare_ties", drop=0.3, seed=8))
    assert first.clean and first.changes == again.changes and first.changes != other.changes
    assert first.trailer == "model dare_ties seed=7 drop=0.3 rank=4"
    report = first.report["adapter"]
    assert report["modules"] == {"merged": 4} and 0.0 < report["error"] < 1.0
    merged = commit_merge(repo, ours, theirs, first, "m3")
    out = checkout_model(repo, merged, tmp_path / "out")
    assert json.loads((out / "adapter_config.json").read_text())["r"] == 4
    assert torch.isfinite(logits(out)).all()


def test_rank_option_refactors_and_reports_the_error(repo, tmp_path, forked):
    a0, root = forked
    theirs = snap(repo, tmp_path, "theirs", adapter=train(a0, tmp_path / "t", seed=5))
    ours = snap(repo, tmp_path, "ours", adapter=train(a0, tmp_path / "o", seed=6))
    result = ModelMerger().merge(ctx(repo, root, ours, theirs, method="linear", rank=2))
    assert result.clean and result.report["adapter"]["rank"] == 2
    assert 0.0 < result.report["adapter"]["error"] < 1.0
    out = checkout_model(repo, commit_merge(repo, ours, theirs, result, "m4"), tmp_path / "out")
    assert load_file(str(out / WEIGHTS))["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"].shape[0] == 2
    assert torch.isfinite(logits(out)).all()


def test_conflicts_and_bad_options(repo, tmp_path, forked):
    a0, root = forked
    ours = snap(repo, tmp_path, "ours", base_model="tiny@v2")
    theirs = snap(repo, tmp_path, "theirs", base_model="tiny@v3")
    result = ModelMerger().merge(ctx(repo, root, ours, theirs))
    assert not result.clean and result.conflicts == ["CONFLICT (model): both sides changed the base model differently"]
    assert BASE not in result.changes
    for bad, needle in [({"method": "slerp"}, "--model-method"), ({"density": 0}, "--density"),
                        ({"drop": 1.0}, "--drop"), ({"seed": -1}, "--seed"), ({"weights": "1,x"}, "--weights")]:
        with pytest.raises(UsageError, match=needle):
            ModelMerger().merge(ctx(repo, root, ours, theirs, **bad))


def test_three_way_without_an_adapter_in_the_base_uses_zero(repo, tmp_path):
    root = snap(repo, tmp_path, "main")
    repo.create_branch("ours", root.id)
    repo.create_branch("theirs", root.id)
    a = make_adapter(tmp_path / "a", seed=1)
    ours = snap(repo, tmp_path, "ours", adapter=a)
    theirs = snap(repo, tmp_path, "theirs", adapter=a)
    same = ModelMerger().merge(ctx(repo, root, ours, theirs))
    assert same.clean and same.changes == {}  # both added the same adapter
    theirs2 = snap(repo, tmp_path, "theirs", adapter=make_adapter(tmp_path / "b", seed=2))
    result = ModelMerger().merge(ctx(repo, root, ours, theirs2, method="linear"))
    assert result.clean and result.report["adapter"]["modules"] == {"merged": 4}
    assert ADAPTER in result.changes


def _pf(run_pf, tmp_path, *args, check=True):
    return run_pf(*args, cwd=tmp_path / "repo", check=check)


def test_model_merge_n_way_cli(repo, run_pf, tmp_path, forked):
    a0, root = forked
    images = []
    for i in range(3):
        repo.create_branch(f"f{i}", root.id)
        images.append(snap(repo, tmp_path, f"f{i}", adapter=train(a0, tmp_path / f"f{i}", seed=10 + i)))
    proc = _pf(run_pf, tmp_path, "model-merge", "f0", "f1", "f2", "--method", "dare_ties", "--drop", "0.2",
               "--seed", "11", "--rank", "2", "-o", "merged", "--json")
    out = json.loads(proc.stdout)
    assert out["branch"] == "merged" and out["base"] == root.id and out["adapter"]["rank"] == 2
    image = repo.resolve("merged")
    assert image.parents == (images[0].id,)
    assert image.trailer("Pf-Model-Source") == [i.id for i in images]
    assert image.trailer("Pf-Merge") == ["model dare_ties seed=11 drop=0.2 rank=2"]
    assert image.manifest["layers"]["model"]["r"] == 2
    dest = checkout_model(repo, image, tmp_path / "out")
    assert torch.isfinite(logits(dest)).all()

    # linear merge of an adapter with itself returns it, byte for byte
    model_merge(repo, ["f0", "f0"], MergeSpec.parse("linear"), "self", base="none")
    same = checkout_model(repo, repo.resolve("self"), tmp_path / "self")
    assert (same / WEIGHTS).read_bytes() == (tmp_path / "f0" / WEIGHTS).read_bytes()
    assert torch.equal(logits(same), logits(tmp_path / "f0"))

    for args, needle in [(["f0", "-o", "x"], "at least two images"),
                         (["f0", "f1", "-o", "merged"], "already exists"),
                         (["f0", "f1", "--method", "slerp", "-o", "y"], "unknown method"),
                         (["f0", "f1", "--weights", "1,2,3", "-o", "y"], "3 weights given for 2"),
                         (["f0", "nope", "-o", "y"], "unknown revision")]:
        proc = _pf(run_pf, tmp_path, "model-merge", *args, check=False)
        assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert repo.git.references.get("refs/pf/heads/y") is None


def test_git_pf_merge_merges_trained_adapters(repo, run_pf, tmp_path, forked):
    a0, root = forked
    snap(repo, tmp_path, "theirs", adapter=train(a0, tmp_path / "t", seed=5))
    snap(repo, tmp_path, "ours", adapter=train(a0, tmp_path / "o", seed=6))
    proc = _pf(run_pf, tmp_path, "merge", "theirs", "--into", "ours", "--model-method", "dare-ties", "--drop", "0.3",
               "--seed", "7", "--weights", "1", "--weights", "0.5", "--json")
    assert json.loads(proc.stdout)["branch"] == "ours"
    merged = repo.resolve("ours")
    assert merged.parents[1] == repo.resolve("theirs").id
    assert "model dare_ties seed=7 drop=0.3 weights=1,0.5 rank=4" in merged.trailer("Pf-Merge")
    out = checkout_model(repo, merged, tmp_path / "out")
    assert torch.isfinite(logits(out)).all()
    state = read_state(repo.git, merged.tree)
    assert state.adapter.index != read_state(repo.git, repo.resolve("theirs").tree).adapter.index


def test_a_merge_where_one_side_trained_never_imports_torch(repo, tmp_path, forked):
    import subprocess
    import sys

    a0, root = forked
    snap(repo, tmp_path, "theirs", adapter=train(a0, tmp_path / "t", seed=5))
    snap(repo, tmp_path, "ours", text="world change\n")
    code = """
import sys
from git_pf.cli.app import main
assert main(["merge", "theirs", "--into", "ours", "--model-method", "ties", "--density", "0.5"]) == 0
bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "safetensors", "peft", "transformers")]
assert not bad, bad
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "repo", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    merged = repo.resolve("ours")
    assert read_state(repo.git, merged.tree).adapter == read_state(repo.git, repo.resolve("theirs").tree).adapter
    assert "model theirs" in merged.trailer("Pf-Merge")
