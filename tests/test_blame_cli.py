"""``git pf blame`` as a user runs it: the budget (refused before anything is written, the spend
meter stopping the trials, the same command resuming), bad input as one line, a plug-in
perturbation, the table, and trials travelling with a plain git push / fetch."""
from __future__ import annotations

import json
import subprocess

from git_pf import Repo
from git_pf.blame import store
from git_pf.runs.llm import wire
from git_pf.testing.fakellm import FakeLLM
from blame_helpers import AGENT, HERE, ORACLE, REPLIES, by_step, record
from runs_helpers import tape


def _git(root, *args, check=True):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=check).stdout.strip()


def _blame_refs(root, prefix: str = "refs/pf/blame/") -> dict[str, str]:
    out = _git(root, "for-each-ref", "--format=%(refname) %(objectname)", prefix)
    return dict(line.split() for line in out.splitlines())


def _one_line(proc, code: int, words: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_budget_is_refused_before_anything_is_written_then_the_meter_stops_and_the_same_command_resumes(
        repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES), model="cheap") as fake:
        record(run_pf, root, fake)
    step4 = wire.usage([e for e in tape(root, "refs/pf/heads/run") if e.get("step") == 4][0])
    tokens = step4["input_tokens"] + step4["output_tokens"]
    _git(root, "config", "pf.price.cheap.input", "1")
    _git(root, "config", "pf.price.cheap.output", "1")
    _git(root, "config", "pf.price.pricey.input", "1000000")  # a live answer costs $1 a token
    _git(root, "config", "pf.price.pricey.output", "1000000")
    with FakeLLM(by_step(REPLIES), model="pricey") as live:
        base = ["blame", "run", "--oracle", ORACLE, "-k", "2", "--steps", "3..4", "--upstream", live.url, "--no-mount"]

        # the estimate (2 trials re-run step 4 at the recorded, cheap price) is over a tiny budget
        _one_line(run_pf(*base, "--budget", "0.000001", "--", *AGENT, cwd=root, check=False), 1, "over --budget")
        assert _blame_refs(root) == {} and live.requests == []

        # the estimate fits, but the live answers are dear: the second trial at step 3 crosses the budget
        proc = run_pf(*base, "--budget", str(1.5 * tokens), "--", *AGENT, cwd=root, check=False)
        assert proc.returncode == 1 and "run the same command again" in proc.stderr.splitlines()[-1], proc.stderr
        first = _blame_refs(root)
        # the stopped trial has no verdict: only its half-run steps, which the resume replaces
        assert set(first) == {"refs/pf/blame/run/meta", "refs/pf/blame/run/step-3/1", "refs/pf/blame/run/work/step-3/2"}
        first.pop("refs/pf/blame/run/work/step-3/2")
        assert len(live.requests) == 2  # no trial started after the stop

        proc = run_pf(*base, "--budget", str(10 * tokens), "--json", "--", *AGENT, cwd=root)
    out = json.loads(proc.stdout)
    assert out["resumed"] == 1 and len(out["trials"]) == 4
    now = _blame_refs(root)
    assert {k: now[k] for k in first} == first  # the finished trial and the settings were not redone
    assert not [k for k in now if "/work/" in k]
    assert [t["outcome"] for t in out["trials"]] == ["flip", "flip", "no-flip", "no-flip"]
    assert out["cost"]["spent_usd"] >= tokens and out["cost"]["estimate_usd"] < 1


def test_bad_input_is_one_line_and_a_plugin_perturbation_runs(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES)) as fake:
        record(run_pf, root, fake)
        base = ["blame", "run", "--upstream", fake.url, "--no-mount"]
        for args, code, words in (
                (("--oracle", "true"), 1, "does not fail"),
                (("--oracle", ORACLE, "--perturb", "no_such_module_x:fn"), 2, "cannot import"),
                (("--oracle", ORACLE, "--perturb", "blame_helpers:nope"), 2, "has no 'nope'"),
                (("--oracle", ORACLE, "--budget", "1"), 2, "no price for model"),
                (("--success-re", "(",), 2, "not a regular expression"),
                (("--oracle", ORACLE, "--steps", "2..9"), 2, "steps 1..4"),
                ((), 2, "--oracle CMD or --success-re")):
            proc = run_pf(*base, *args, "--", *AGENT, cwd=root, check=False, env={"PYTHONPATH": str(HERE.parent)})
            _one_line(proc, code, words)
            assert _blame_refs(root) == {}, args

        env = {"PYTHONPATH": str(HERE.parent)}
        plug = ["--oracle", ORACLE, "-k", "1", "--steps", "3..3", "--perturb", "blame_helpers:fix"]
        proc = run_pf(*base, *plug, "--", *AGENT, cwd=root, env=env)
        lines = proc.stdout.splitlines()
        assert lines[-1] == "no decisive step"  # one trial is too few to claim anything
        assert lines[-2].split() == ["3", "1", "1", "0", "-", "-", "-", "insufficient"]
        assert "step 3 trial 1: flip" in proc.stderr
        assert "warning: with -k 1 no step gets the 3 gradable trials" in proc.stderr

        proc = run_pf(*base, *plug[:2], "-k", "2", *plug[4:], "--", *AGENT, cwd=root, check=False, env=env)
        _one_line(proc, 2, "exists with other settings (k)")


def test_trials_travel_with_a_plain_git_push_and_fetch(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES)) as fake:
        record(run_pf, root, fake)
        run_pf("blame", "run", "--oracle", ORACLE, "-k", "1", "--steps", "3..4", "--upstream", fake.url,
               "--no-mount", "--", *AGENT, cwd=root)
    ours = _blame_refs(root)
    assert len(ours) == 3
    remote = tmp_path / "remote.git"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(root, "remote", "add", "origin", str(remote))
    run_pf("install", cwd=root)
    _git(root, "push", "-q")
    assert _blame_refs(remote) == ours

    other = tmp_path / "other"
    run_pf("init", other, cwd=tmp_path)
    _git(other, "remote", "add", "origin", str(remote))
    run_pf("install", cwd=other)
    _git(other, "fetch", "-q")
    # fetched into remote-tracking refs: a fetch never overwrites a local blame run
    tracked = {k.replace("refs/pf/remotes/origin/blame/", "refs/pf/blame/"): v for k, v in
               _blame_refs(other, "refs/pf/remotes/origin/blame/").items()}
    assert tracked == ours and _blame_refs(other) == {}
    # the fetched trials read back whole: the same verdicts, their trial images there too
    fetched = store.summary(Repo.open(other), "run")
    assert store.runs(Repo.open(other)) == ["run"]
    assert [(t["step"], t["outcome"], t["commit"]) for t in fetched["trials"]] == \
        [(3, "flip", ours["refs/pf/blame/run/step-3/1"]), (4, "no-flip", ours["refs/pf/blame/run/step-4/1"])]
    assert all(_git(other, "cat-file", "-t", t["tip"]) == "commit" for t in fetched["trials"])
    for where in (root, other):  # a blame run's settings commit is no image: fsck and gc leave it alone
        checked = run_pf("fsck", cwd=where, check=False)
        assert checked.returncode == 0, checked.stdout + checked.stderr
    # blaming it again there, with the same settings, adopts the fetched trials and resumes: nothing re-runs
    with FakeLLM(by_step(REPLIES)) as fake:
        out = run_pf("blame", "refs/pf/remotes/origin/heads/run", "--name", "run", "--oracle", ORACLE, "-k", "1",
                     "--steps", "3..4", "--upstream", fake.url, "--no-mount", "--json", "--", *AGENT, cwd=other)
        assert fake.requests == []
    assert json.loads(out.stdout)["resumed"] == 2 and _blame_refs(other) == ours
