"""The layer protocol (docs/architecture.md, "The layer registry"): every registered layer's
code can be found, and snapshot, diff, show and fsck go through it, layer by layer."""
from __future__ import annotations

import json

from git_pf.layers import registry
from git_pf.layers.base import Layer
from git_pf.ops.snapshot_inputs import EnvInput, TraceInput

METHODS = ("input", "checkout_plan", "checkout", "diff", "patches", "make_merger", "merge_start", "report_line",
           "summary", "fsck", "object_refs", "tree_problems")


def _overrides(layer, method: str) -> bool:
    return getattr(type(layer), method) is not getattr(Layer, method)


def test_every_layer_names_code_that_loads():
    for layer in registry.layers():
        assert isinstance(layer, Layer) and all(callable(getattr(layer, m)) for m in METHODS), layer.name
        specs = list(layer.parsers.values()) + list(layer.tree_checks.values())
        specs += [] if layer.needs_extra else [layer.merger]  # a merge with torch is not loaded for this
        for spec in (s for s in specs if s):
            assert callable(registry.load(spec)), (layer.name, spec)
    # model and cache bring their own diff, summary and checkout writer; model its own fsck
    for name in ("model", "cache"):
        assert all(_overrides(registry.get(name), m) for m in ("diff", "summary", "checkout", "object_refs"))
    assert _overrides(registry.get("model"), "fsck")


def test_a_diff_reads_only_its_own_paths_and_layers_diff_in_one_order():
    diffed = [layer for layer in registry.layers() if _overrides(layer, "diff")]
    assert [layer.name for layer in sorted(diffed, key=lambda x: x.diff_rank)] == \
        ["world", "trace", "effects", "env", "model", "cache"]
    assert len({layer.diff_rank for layer in diffed}) == len(diffed)
    for layer in diffed:
        assert layer.diff_paths and all(any(p == c or p.startswith(c + b"/") for c in layer.claims)
                                         for p in layer.diff_paths), layer.name


def test_snapshot_summaries_come_from_each_layer(repo, tmp_path):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    (sandbox / "a.txt").write_text("hello")
    repo.snapshot(sandbox, trace=TraceInput(messages=[{"role": "user", "content": "hi"}], tape=[{"n": 1}]),
                  effects=[{"tool": "send", "args": {"to": "x"}, "side_effect_class": "irreversible",
                            "idempotency_key": "k1", "ts": "2026-01-01T00:00:00Z", "result": "ok"}],
                  env=EnvInput({"HOME": "/h", "API_TOKEN": "s3cret"}, {"schema": 1, "root": 1, "processes": []}))
    layers = repo.resolve("main").manifest["layers"]
    assert layers["world"] == {"files": 1, "bytes": 5, "pointers": 0, "env_vars": 2, "redacted": 1}
    assert layers["trace"]["messages"] == 1 and layers["tape"] == {"exchanges": 1}
    assert layers["effects"] == {"entries": 1, "irreversible": 1} and layers["procs"] == {"processes": 0}
    # a layer not given is inherited: its summary and files stay as the parent's
    (sandbox / "a.txt").write_text("hello!")
    repo.snapshot(sandbox)
    after = repo.resolve("main").manifest["layers"]
    assert {k: after[k] for k in ("trace", "tape", "effects", "procs")} == \
        {k: layers[k] for k in ("trace", "tape", "effects", "procs")}
    assert after["world"]["bytes"] == 6 and after["world"]["redacted"] == 1


def test_a_tape_only_change_is_a_difference(repo, tmp_path, run_pf):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    repo.snapshot(sandbox, trace=TraceInput(tape=[{"n": 1}]))
    repo.snapshot(sandbox, trace=TraceInput(tape=[{"n": 1}, {"n": 2}]))
    d = repo.diff("main~1", "main")
    assert not d.empty and d.trace.exchanges_added == 1 and d.other == []
    out = run_pf("diff", "main~1", "main", "--stat", cwd=tmp_path / "repo").stdout
    assert out.splitlines() == ["world:   0 added, 0 changed, 0 removed",
                                "trace:   0 -> 0 messages, 0 appended; tape 1 added, 0 removed",
                                "effects: 0 added, 0 removed", "env:     0 added, 0 changed, 0 removed"]
    assert json.loads(run_pf("diff", "main~1", "main", "--json", cwd=tmp_path / "repo").stdout)["trace"] == \
        d.trace.to_json()
