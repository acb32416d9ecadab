"""Model layer capture and restore: real peft adapters in, byte-identical adapters out."""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys

import pytest
import torch
from safetensors.torch import save_file

from git_pf.core.errors import UsageError
from git_pf.layers.model.layer import ModelInput
from git_pf.layers.model.state import read_state

from model_helpers import WEIGHTS, logits, make_adapter, sandbox, train

SHA = "ab" * 32
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning")


def snap(repo, tmp_path, **model):
    return repo.snapshot(sandbox(tmp_path), layers=(ModelInput.prepare(**model),)).image


def test_checkout_gives_the_same_adapter_and_bitwise_same_logits(repo, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    image = snap(repo, tmp_path, adapter=ad, base_model=f"tiny-llama@v1:{SHA}")
    out = tmp_path / "out"
    repo.checkout(image.id, out, layers=("model",))
    assert sorted(os.listdir(out)) == ["adapter_config.json", WEIGHTS, "base.json"]
    assert (out / WEIGHTS).read_bytes() == (ad / WEIGHTS).read_bytes()
    assert (out / "adapter_config.json").read_bytes() == (ad / "adapter_config.json").read_bytes()
    assert json.loads((out / "base.json").read_text()) == {"name": "tiny-llama", "revision": "v1", "sha256": SHA}
    assert torch.equal(logits(out), logits(ad))
    summary = image.manifest["layers"]["model"]
    assert summary == {"base": f"tiny-llama@v1:{SHA[:12]}", "peft_type": "LORA", "r": 4, "lora_alpha": 8,
                       "tensors": 8, "parameters": 1024, "bytes": (ad / WEIGHTS).stat().st_size}
    assert read_state(repo.git, image.tree).adapter.index.header is None  # peft's file is in canonical layout


def test_unchanged_tensors_are_stored_once(repo, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    snap(repo, tmp_path, adapter=ad)
    before = set(repo.store.iter_oids())
    trained = train(ad, tmp_path / "ad2", seed=3, only="layers.1.self_attn.v_proj.lora_B")
    image = snap(repo, tmp_path, adapter=trained)
    added = set(repo.store.iter_oids()) - before
    index = read_state(repo.git, image.tree).adapter.index
    changed = [t.sha256 for t in index.tensors if "layers.1.self_attn.v_proj.lora_B" in t.name]
    assert added == set(changed) and len(added) == 1
    assert len(before) == 8  # one object per tensor of the first adapter


def test_later_snapshots_inherit_the_model_layer(repo, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    first = snap(repo, tmp_path, adapter=ad)
    (tmp_path / "sb" / "notes.txt").write_text("changed\n")
    second = repo.snapshot(tmp_path / "sb").image
    assert second.id != first.id
    assert read_state(repo.git, second.tree) == read_state(repo.git, first.tree)
    third = snap(repo, tmp_path, base_model="other-base")
    state = read_state(repo.git, third.tree)
    assert state.base.name == "other-base" and state.adapter == read_state(repo.git, first.tree).adapter


def test_delta_round_trips_byte_exact_with_mixed_dtypes(repo, tmp_path):
    delta = tmp_path / "delta.safetensors"
    torch.manual_seed(0)
    save_file({"w.a": torch.randn(16, 8).to(torch.bfloat16), "w.b": torch.randn(5), "w.empty": torch.zeros(0, 3),
               "w.i": torch.arange(6, dtype=torch.int64)}, str(delta), metadata={"note": "x", "format": "pt"})
    image = snap(repo, tmp_path, delta=delta)
    out = tmp_path / "out"
    repo.checkout(image.id, out, layers=("model",))
    assert (out / "delta.safetensors").read_bytes() == delta.read_bytes()


def test_a_non_canonical_header_is_kept_verbatim(repo, tmp_path):
    header = b'{"b":{"shape":[2],"dtype":"F32","data_offsets":[0,8]}, "a":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}}'
    data = struct.pack("<Q", len(header)) + header + struct.pack("<3f", 1.0, 2.0, 3.0)
    path = tmp_path / "odd.safetensors"
    path.write_bytes(data)
    image = snap(repo, tmp_path, delta=path)
    assert read_state(repo.git, image.tree).delta.header is not None
    out = tmp_path / "out"
    repo.checkout(image.id, out, layers=("model",))
    assert (out / "delta.safetensors").read_bytes() == data


def test_the_same_adapter_gives_the_same_tree(repo, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    a = snap(repo, tmp_path, adapter=ad)
    b = repo.snapshot(sandbox(tmp_path), layers=(ModelInput.prepare(adapter=ad),))
    assert b.unchanged and b.image.id == a.id


@pytest.mark.parametrize("spec", ["", "@rev", "name@", "name:abc", "na me", "name:sha256:" + "g" * 64])
def test_bad_base_model_specs_are_refused(spec):
    with pytest.raises(UsageError, match="--base-model"):
        ModelInput.prepare(base_model=spec)


def test_good_base_model_specs():
    from git_pf.layers.model.identity import BaseModel

    assert BaseModel.parse("org/m@main") == BaseModel("org/m", "main", None)
    assert BaseModel.parse(f"m:sha256:{SHA.upper()}") == BaseModel("m", None, SHA)
    assert BaseModel.parse(f"a@b@c:{SHA}") == BaseModel("a@b", "c", SHA)


def _pf(run_pf, tmp_path, *args, check=True):
    return run_pf(*args, cwd=tmp_path / "repo", check=check)


def _one_line_exit_2(proc, needle):
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_cli_capture_checkout_and_bad_inputs(repo, run_pf, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    sb = sandbox(tmp_path)
    image_id = _pf(run_pf, tmp_path, "snapshot", "--fs-root", sb, "--adapter", ad, "--base-model", "tiny@v1").stdout.strip()
    _pf(run_pf, tmp_path, "checkout", "HEAD", "--layers", "model", "--into", tmp_path / "out")
    assert (tmp_path / "out" / WEIGHTS).read_bytes() == (ad / WEIGHTS).read_bytes()

    no_config = tmp_path / "no_config"
    no_config.mkdir()
    (no_config / WEIGHTS).write_bytes((ad / WEIGHTS).read_bytes())
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    (corrupt / "adapter_config.json").write_bytes((ad / "adapter_config.json").read_bytes())
    (corrupt / WEIGHTS).write_bytes((ad / WEIGHTS).read_bytes()[:-10])
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(struct.pack("<Q", 4) + b"nope")
    bin_only = tmp_path / "bin_only"
    bin_only.mkdir()
    (bin_only / "adapter_config.json").write_text("{}")
    (bin_only / "adapter_model.bin").write_bytes(b"x")
    cases = [
        (["--adapter", no_config], "has no adapter_config.json"),
        (["--adapter", corrupt], "is not a valid safetensors file"),
        (["--adapter", bin_only], "adapter_model.bin is not supported"),
        (["--adapter", tmp_path / "missing"], "does not exist"),
        (["--delta", garbage], "not valid JSON"),
        (["--delta", tmp_path], "is a directory"),
        (["--base-model", "m:1234"], "--base-model"),
    ]
    for args, needle in cases:
        _one_line_exit_2(_pf(run_pf, tmp_path, "snapshot", "--fs-root", sb, *args, "--allow-empty", check=False), needle)
    assert [i.id for i in repo.log()] == [image_id]  # no image was written by a refused snapshot

    world_only = repo.snapshot(sb, name="plain").image
    _one_line_exit_2(_pf(run_pf, tmp_path, "checkout", world_only.id, "--layers", "model", "--into", tmp_path / "o2",
                         check=False), "has no model layer")


def test_core_commands_never_import_torch(repo, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    sb = sandbox(tmp_path)
    code = f"""
import sys
from git_pf.cli.app import main
assert main(["snapshot", "--fs-root", {str(sb)!r}, "-q"]) == 0
assert main(["snapshot", "--fs-root", {str(sb)!r}, "--adapter", {str(ad)!r}, "-q"]) == 0
assert main(["log"]) == 0 and main(["show", "HEAD"]) == 0
assert main(["checkout", "HEAD", "--layers", "model", "--into", {str(tmp_path / "o")!r}]) == 0
bad = [m for m in sys.modules if m.split(".")[0] in ("torch", "safetensors", "peft", "transformers")]
assert not bad, bad
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path / "repo", capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_a_damaged_tensor_object_fails_the_checkout_cleanly(repo, run_pf, tmp_path):
    import zstandard

    ad = make_adapter(tmp_path / "ad")
    image = snap(repo, tmp_path, adapter=ad)
    victim = read_state(repo.git, image.tree).adapter.index.tensors[3].sha256
    path = repo.store.path_for(victim)
    path.chmod(0o644)
    path.write_bytes(zstandard.ZstdCompressor().compress(b"\0" * 512))
    proc = run_pf("checkout", image.id, "--layers", "model", "--into", tmp_path / "out", cwd=tmp_path / "repo", check=False)
    assert proc.returncode == 3 and victim in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "out").exists()
    fsck = run_pf("fsck", cwd=tmp_path / "repo", check=False)
    assert fsck.returncode == 1 and victim in fsck.stdout + fsck.stderr


def test_fsck_reports_a_missing_tensor_object_and_gc_keeps_the_rest(repo, run_pf, tmp_path):
    ad = make_adapter(tmp_path / "ad")
    image = snap(repo, tmp_path, adapter=ad)
    stray = repo.store.put(b"an object no image reaches")
    run_pf("gc", "--prune", "now", cwd=tmp_path / "repo")
    assert not repo.store.has(stray) and len(list(repo.store.iter_oids())) == 8
    assert run_pf("fsck", cwd=tmp_path / "repo").returncode == 0  # gc kept every tensor the image needs
    victim = read_state(repo.git, image.tree).adapter.index.tensors[0].sha256
    repo.store.remove(victim)
    fsck = run_pf("fsck", cwd=tmp_path / "repo", check=False)
    assert fsck.returncode == 1 and f"layer model: side-store object {victim} is missing" in fsck.stdout + fsck.stderr
