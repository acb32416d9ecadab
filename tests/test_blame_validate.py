"""``git pf blame --validate`` and its scripted agent, model and oracle (git_pf/testing/scripted.py): the
fault plan, how each fault class hurts the world, that the fault step is the one whose change saves the
run, and a small validation run end to end. Real components: the fake LLM server on 127.0.0.1, the
scripted agent as a subprocess recorded by the real ``git-pf``, the oracle as a command."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from git_pf.testing import scripted
from git_pf.blame.validate import case_plan, top3
from git_pf.testing.fakellm import FakeLLM

SCRIPTED = [sys.executable, "-m", "git_pf.testing.scripted"]


def oracle(seed: int, world: Path) -> subprocess.CompletedProcess:
    return subprocess.run([*SCRIPTED, "check", "--task-seed", str(seed)], cwd=world, capture_output=True, text=True)


def record_case(run_pf, root: Path, world: Path, plan: scripted.FaultPlan) -> None:
    """Record task ``plan.seed`` against the scripted model with ``plan``'s fault."""
    world.mkdir(parents=True)
    subprocess.run([*SCRIPTED, "init", "--task-seed", str(plan.seed), str(world)], check=True)
    with FakeLLM(scripted.ScriptedModel(plan)) as fake:
        proc = run_pf("record", "--name", "case", "--fs-root", world, "--upstream", fake.url, "--json", "--",
                      *SCRIPTED, "agent", "--task-seed", plan.seed, cwd=root)
    assert json.loads(proc.stdout)["steps"] == plan.steps  # the agent itself prints nothing


def plan_inside(fault: str) -> scripted.FaultPlan:
    """The first task whose ``fault`` falls strictly inside the run (neither its first nor last step)."""
    return next(p for p in map(lambda s: scripted.fault_plan(s, fault), range(100)) if 1 < p.step < p.steps)


def test_the_fault_plan_is_drawn_from_the_seed_and_spreads_over_the_steps():
    plans = [scripted.fault_plan(seed) for seed in range(60)]
    assert plans == [scripted.fault_plan(seed) for seed in range(60)]  # seeded: the same plan every time
    assert all(5 <= p.steps <= 8 and 1 <= p.step <= p.steps for p in plans)
    steps = [p.step for p in plans]
    assert len(set(steps)) >= 5 and steps.count(1) < len(steps) / 3  # not always (nor mostly) the first
    assert any(p.step == p.steps for p in plans)  # the last step too
    assert {p.fault for p in plans} == set(scripted.FAULTS)
    assert scripted.fault_plan(3, "dropped_message").fault == "dropped_message"
    with pytest.raises(ValueError):
        scripted.fault_plan(3, "gremlins")
    # a validation's cases: one fault class after another, their fault steps differ with the seed
    cases = [case_plan(0, c) for c in range(10)]
    assert [p.fault for p in cases] == list(scripted.FAULTS) * 2
    assert len({p.step for p in cases}) > 1
    assert [p.step for p in cases] != [p.step for p in (case_plan(1, c) for c in range(10))]


def test_the_model_answers_the_fault_once_then_healthily():
    plan = scripted.fault_plan(11, "corrupted_output")
    model = scripted.ScriptedModel(plan)
    ask = lambda i: model("openai.chat", {"messages": [{"role": "user", "content": f"step {i}/{plan.steps}. x"}]}, 1)
    healthy = scripted.reply_text(plan.seed, plan.step)
    first = ask(plan.step)
    assert first != healthy and "\ufffd" in json.loads(first)["tool_output"]
    assert ask(plan.step) == healthy  # asked again: the transient fault is gone
    assert [ask(i) for i in range(1, plan.steps + 1)] == [scripted.reply_text(plan.seed, i)
                                                          for i in range(1, plan.steps + 1)]


def _index(world: Path) -> list[str]:
    p = world / scripted.INDEX
    return p.read_text().split() if p.is_file() else []


@pytest.mark.parametrize("fault", scripted.FAULTS)
def test_each_fault_class_hurts_the_world_its_own_way(repo, run_pf, tmp_path, fault):
    plan = plan_inside(fault)
    f, world, rec = plan.step, tmp_path / "world", f"out/{scripted.key(plan.step)}.txt"
    record_case(run_pf, repo.git_dir.parent, world, plan)
    proc = oracle(plan.seed, world)
    assert proc.returncode == 1 and proc.stdout.startswith("fail: ")
    problems = set(scripted.problems(plan.seed, world))
    keys = [scripted.key(i) for i in range(1, plan.steps + 1)]
    if fault == "corrupted_output":  # one record holds a garbled value; everything else is right
        assert problems == {f"{rec}: wrong content"} and "\ufffd" in (world / rec).read_text()
    elif fault == "misleading_retrieval":  # the record names another record; the index lists that one twice
        assert problems == {f"{rec}: wrong content", "out/index.txt: wrong content"}
        assert _index(world) == keys[:f - 1] + [keys[f % plan.steps]] + keys[f:]
    elif fault == "wrong_instruction":  # the work indexed before step f is gone, f's record never written
        assert problems == {f"{rec}: missing", "out/index.txt: wrong content"} and _index(world) == keys[f:]
    elif fault == "dropped_message":  # step f did nothing
        assert problems == {f"{rec}: missing", "out/index.txt: wrong content"}
        assert _index(world) == keys[:f - 1] + keys[f:]
    else:  # poisoned_argument: the record overwrote the task's own file
        assert problems == {f"{rec}: missing", "task.json: wrong content"} and _index(world) == keys
    if fault == "poisoned_argument":
        assert (world / "task.json").read_text().startswith(scripted.key(f))


def test_a_fork_at_the_fault_step_saves_the_run_and_a_fork_after_it_cannot(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    plan = plan_inside("misleading_retrieval")
    record_case(run_pf, root, tmp_path / "world", plan)
    with FakeLLM(scripted.ScriptedModel(plan)) as fake:
        fake.script.faults_served = 1  # the transient fault happened during the recording
        for at, saved in ((plan.step, True), (plan.step + 1, False)):
            reply = tmp_path / f"reply-{at}.txt"
            reply.write_text(scripted.reply_text(plan.seed, at))  # the model's healthy answer there
            run_pf("fork", "case", "--at-step", at, "--response", reply, "--name", f"at-{at}", cwd=root)
            world = tmp_path / f"w-{at}"
            run_pf("run", f"at-{at}", "--upstream", fake.url, "--fs-root", world, "--",
                   *SCRIPTED, "agent", "--task-seed", plan.seed, cwd=root)
            proc = oracle(plan.seed, world)
            assert (proc.returncode == 0) is saved, (at, proc.stdout)
    assert proc.stdout.startswith("fail: ") and oracle(plan.seed, tmp_path / f"w-{plan.step}").stdout.startswith("ok")


def test_the_scripted_commands_say_bad_input_in_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_BASE_URL", "GIT_PF_WORLD")}
    for args, words in ((["agent", "--task-seed", "3", "--sandbox", str(tmp_path)], "OPENAI_BASE_URL"),
                        (["agent", "--task-seed", "x"], "task seed"),
                        (["check", "--task-seed", "3", "--world", str(tmp_path / "nope")], "not a directory"),
                        (["serve"], "invalid choice")):
        proc = subprocess.run([*SCRIPTED, *args], capture_output=True, text=True, env=env)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, (args, proc.stderr)
    with FakeLLM(["not the scripted model"]) as fake:  # another model's replies are no instructions
        proc = subprocess.run([*SCRIPTED, "agent", "--task-seed", "3", "--sandbox", str(tmp_path), "--verbose"],
                              capture_output=True, text=True, env=dict(env, OPENAI_BASE_URL=fake.openai_url))
    assert proc.returncode == 0 and "no instruction received" in proc.stdout
    assert oracle(3, tmp_path).returncode == 1


def test_top3_breaks_ties_toward_later_steps():
    rows = [{"step": 1, "rate": 1.0}, {"step": 2, "rate": 0.5}, {"step": 3, "rate": 0.5}, {"step": 4, "rate": None},
            {"step": 5, "rate": 0.5}]
    assert top3(rows) == [1, 5, 3]


def test_a_small_validation_finds_every_fault_step_and_its_control_blames_none(run_pf, tmp_path):
    """Five cases, one per fault class, K=3 (the fewest trials with which a step of 1..8 can come out
    decisive at alpha 0.05); seed 44 draws short tasks (27 steps in all) to keep it quick."""
    proc = run_pf("blame", "--validate", "--cases", 5, "-k", 3, "--jobs", 2, "--seed", 44, "--json")
    out = json.loads(proc.stdout)
    assert [r["fault"] for r in out["rows"]] == list(scripted.FAULTS)
    assert [r["fault_step"] for r in out["rows"]] == [case_plan(44, c).step for c in range(5)]
    assert [r["blamed"] for r in out["rows"]] == [r["fault_step"] for r in out["rows"]]
    assert out["overall"]["top1"]["hits"] == 5 and out["overall"]["top3"]["hits"] == 5
    lo, hi = out["overall"]["top1"]["wilson"]
    assert 0.4 < lo < 1.0 and hi == 1.0
    assert all(a["cases"] == 1 and a["top1"]["rate"] == 1.0 for a in out["by_fault"].values())
    assert out["control"] == {"cases": 5, "none": 5, "fraction_none": 1.0, "holds": True}
    assert all(r["control_decisive"] is None and r["baseline"]["grade"] == "fail" for r in out["rows"])
    # the rate at the fault step is 1, at every other step 0: a change before the fault replays it, after it
    # cannot undo it
    for r in out["rows"]:
        assert {int(s): v for s, v in r["rates"].items()} == {s: float(s == r["fault_step"])
                                                             for s in range(1, r["steps"] + 1)}


def test_validate_says_bad_input_in_one_line(run_pf, tmp_path):
    for args, words in ((("--cases", 0), "--cases"), (("--perturb", "none"), "control"),
                        (("--perturb", "bogus"), "bogus"), (("HEAD",), "no REV")):
        proc = run_pf("blame", "--validate", *args, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("seed,case", [(1, 2), (2, 3)], ids=["seed1-wrong_instruction-at-1", "seed2-dropped-at-1"])
def test_validation_holds_over_other_seeds_with_a_fault_at_step_1(seed, case):
    """Seed 1's third case deletes the index at step 1 of 7; with tools that are not idempotent (the
    index is appended to) every trial must start in step 0's world for the later steps to grade."""
    from git_pf.blame.validate import run_case

    plan = case_plan(seed, case)
    assert plan.step == 1
    row = run_case(plan, k=3, jobs=2, perturb="resample", seed=seed)
    assert row["blamed"] == 1 and row["control_decisive"] is None
    assert {int(s): v for s, v in row["rates"].items()} == {s: float(s == 1) for s in range(1, plan.steps + 1)}
