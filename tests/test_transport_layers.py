"""Model-layer tensors travel with their images: push, clone, checkout --layers model, gc keeps them."""
from __future__ import annotations

import json

from model_helpers import make_adapter
from transport_helpers import origin_of, pf


def test_adapter_tensors_push_clone_checkout_and_survive_gc(tmp_path):
    adapter = make_adapter(tmp_path / "lora")
    sb = tmp_path / "sb"
    sb.mkdir()
    (sb / "a.txt").write_text("x\n")
    a = tmp_path / "a"
    pf("init", a, cwd=tmp_path)
    pf("snapshot", "--fs-root", sb, "--adapter", adapter, "-m", "trained", cwd=a)
    remote = origin_of(a, tmp_path)
    pushed = json.loads(pf("push", "origin", "main", "--json", cwd=a).stdout)
    tensors = len([p for p in (a / ".git" / "pf" / "objects").glob("??/*")])
    assert pushed["sent_objects"] == tensors > 0
    b = tmp_path / "b"
    pf("clone", remote, b, cwd=tmp_path)
    pf("checkout", "main", "--layers", "model", "--into", tmp_path / "out", cwd=b)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (tmp_path / "out" / name).read_bytes() == (adapter / name).read_bytes()
    assert json.loads(pf("gc", "--prune=now", "--json", cwd=b).stdout)["removed"] == []
    assert json.loads(pf("gc", "--prune=now", "--json", cwd=a).stdout)["removed"] == []
    assert pf("fsck", cwd=b).returncode == 0
