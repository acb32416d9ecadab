"""Blame through its Python API (git_pf.blame.engine): a scripted agent recorded against the fake LLM,
whose step 3 decides the failure; real proxies, real child processes, real git refs."""
from __future__ import annotations

import subprocess
import time

from git_pf.blame import perturb, store
from git_pf.blame.engine import BlameOptions, blame
from git_pf.blame.grade import Grader
from git_pf.testing.fakellm import FakeLLM
from blame_helpers import AGENT, ORACLE, REPLIES, by_step, record
from world_helpers import gone


def _git(root, *args):
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def test_blame_finds_the_decisive_step_keeps_every_trial_and_resumes_without_redoing(repo, run_pf):
    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES)) as fake:
        record(run_pf, root, fake)
        caches = repo.git_dir / "pf" / "statcache"
        kept = set(caches.iterdir()) if caches.is_dir() else set()
        opts = BlameOptions(oracle=ORACLE, k=3, upstreams=[fake.url], mount=False)
        out = blame(repo, "run", AGENT, opts)
        assert set(caches.iterdir()) == kept  # the trials' temporary worlds leave no stat cache behind
        served = len(fake.requests)
        assert out["decisive"] == 3 and out["resumed"] == 0 and out["run"] == "run"
        rows = {r["step"]: r for r in out["steps"]}
        assert [rows[s]["flips"] for s in (1, 2, 3, 4)] == [0, 0, 3, 0]
        assert [rows[s]["label"] for s in (1, 2, 3, 4)] == ["none", "none", "decisive", "none"]
        assert out["baseline"]["grade"] == "fail"
        assert len(out["trials"]) == 12 and {t["outcome"] for t in out["trials"]} == {"flip", "no-flip"}

        again = blame(repo, "run", AGENT, opts)  # the same command: everything is finished
        assert again["resumed"] == 12 and len(fake.requests) == served
        assert again["trials"] == out["trials"]

    step2 = _git(root, "log", "--format=%H", "--grep=^Pf-Step: 2$", "--first-parent", "refs/pf/heads/run").split()[-1]
    for t in out["trials"]:
        ref = f"refs/pf/blame/run/step-{t['step']}/{t['trial']}"
        assert _git(root, "rev-parse", ref) == t["commit"]
        assert _git(root, "rev-parse", f"{ref}^") == t["tip"]
        assert _git(root, "rev-parse", f"{ref}^{{tree}}") == _git(root, "rev-parse", f"{t['tip']}^{{tree}}")
        body = _git(root, "log", "-1", "--format=%B", ref)
        assert f"Pf-Blame-Step: {t['step']}" in body and f"Pf-Blame-Outcome: {t['outcome']}" in body
        if t["step"] == 3:  # the fork graph is git ancestry: a step-3 trial grows from the run's step 2
            assert subprocess.run(["git", "merge-base", "--is-ancestor", step2, ref], cwd=root).returncode == 0
    assert _git(root, "for-each-ref", "refs/pf/blame/run/work") == ""  # no half-run trial is left
    meta = store.read_meta(repo.git, "run")
    assert meta["k"] == 3 and meta["steps"] == [1, 4] and meta["grade"] == {"oracle": ORACLE}
    assert _git(root, "rev-parse", "refs/pf/blame/run/meta^") == _git(root, "rev-parse", "refs/pf/heads/run")
    assert store.runs(repo) == ["run"] and store.summary(repo, "run")["decisive"] == 3


def test_jobs_2_in_their_own_worlds_give_the_results_of_jobs_1(repo, run_pf):
    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES)) as fake:
        record(run_pf, root, fake)
        common = dict(oracle=ORACLE, k=2, min_valid=2, upstreams=[fake.url], steps=(2, 4))
        one = blame(repo, "run", AGENT, BlameOptions(name="one", jobs=1, **common))
        two = blame(repo, "run", AGENT, BlameOptions(name="two", jobs=2, **common))  # mounts where FUSE is there
    outcomes = [[(t["step"], t["trial"], t["outcome"]) for t in r["trials"]] for r in (one, two)]
    assert outcomes[0] == outcomes[1] and len(outcomes[0]) == 6
    assert one["decisive"] == two["decisive"] == 3
    assert store.runs(repo) == ["one", "two"]


def test_undefined_outcomes_are_counted_as_undefined_never_as_no_flips(repo, run_pf):
    root = repo.git_dir.parent
    replies = ["plan", "work", "more work", "status FAIL"]
    grader = Grader(success_re="status OK", failure_re="FAIL")
    # what the text perturbation makes of the last reply in trials 1..6 (seeded: the same every time)
    expected = [{"success": "flip", "fail": "no-flip", "undefined": "undefined"}[grader._regex(
        perturb.text("status FAIL", perturb.rng_for(0, 4, k)))[0]] for k in range(1, 7)]
    assert "undefined" in expected and "no-flip" in expected  # the case holds both kinds
    with FakeLLM(by_step(replies)) as fake:
        record(run_pf, root, fake)
        out = blame(repo, "run", AGENT, BlameOptions(success_re="status OK", failure_re="FAIL", k=6, steps=(4, 4),
                                                     upstreams=[fake.url], mount=False))
    assert [t["outcome"] for t in out["trials"]] == expected
    row = out["steps"][0]
    assert row["undefined"] == expected.count("undefined") and row["no_flips"] == expected.count("no-flip")
    assert row["trials"] == 6 and row["flips"] + row["no_flips"] + row["undefined"] == 6
    valid = row["flips"] + row["no_flips"]
    assert row["rate"] == (row["flips"] / valid if valid >= 3 else None)
    undefined = [t for t in out["trials"] if t["outcome"] == "undefined"]
    assert all("neither pattern" in t["reason"] for t in undefined)


def test_trials_one_after_another_in_one_world_each_start_from_a_fresh_checkout(repo, run_pf, tmp_path,
                                                                                monkeypatch):
    """The trials a worker runs reuse one world directory (docs/scale.md, "One world per worker"):
    each trial's agent leaves it written, deleted, chmodded, with ignored files, a fifo and xattrs,
    and the next trial still starts in exactly what a fresh checkout of step 0 gives."""
    import sys

    from blame_helpers import HERE, messy_world, seen_world
    from git_pf.runs.replaying import fresh_world
    from git_pf.runs.steps import at_step

    root = repo.git_dir.parent
    messy_world(root.parent / "run-world")
    seen, pids = tmp_path / "seen", tmp_path / "pids"
    seen.mkdir()
    pids.mkdir()
    monkeypatch.setenv("SEEN", str(seen))
    with FakeLLM(by_step(REPLIES)) as fake:
        record(run_pf, root, fake)
        monkeypatch.setenv("PIDS", str(pids))
        out = blame(repo, "run", [sys.executable, str(HERE), "messy"],
                    BlameOptions(oracle=ORACLE, k=2, steps=(2, 4), upstreams=[fake.url], mount=False, jobs=1))
    want = seen_world(fresh_world(repo, at_step(repo.git, "run", 0), tmp_path / "fresh"))
    starts = sorted(seen.iterdir())
    assert len(starts) == 6 and [p.read_text() for p in starts] == [want] * 6
    assert [r["flips"] for r in out["steps"]] == [0, 2, 0]  # the trials themselves as before
    # what each trial's agent left running was killed when it exited (reaped by init a moment later)
    left = [int(p.name) for p in pids.iterdir()]
    assert len(left) == 6
    end = time.monotonic() + 10
    while not all(map(gone, left)) and time.monotonic() < end:
        time.sleep(0.05)
    assert all(map(gone, left))

