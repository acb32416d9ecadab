"""Blame trials and fan-outs on a real Ray cluster (docs/scale.md): a one-node cluster started for
the module, the remote a bare repository behind ``git daemon`` on 127.0.0.1 (a fan-out's large
objects in moto's S3 server), workers with a working directory and HOME of their own that are
given only the remote's URL. And without Ray, ``--executor ray`` is one line naming the extra."""
from __future__ import annotations

import hashlib
import json
import os
import threading
from pathlib import Path

import pygit2
import pytest

import s3_helpers
from git_pf.testing import scripted
from git_pf.testing.fakellm import FakeLLM
from git_pf.runs.steps import at_step
from ray_helpers import kill_worker_running, ray_cluster
from transport_helpers import BIN, bare, git_daemon, sh

PATH = f"{BIN}:{os.environ.get('PATH', '')}"


def _one_line(proc, code: int, words: str) -> None:
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_without_ray_the_ray_executor_is_one_line_naming_the_extra(repo, run_pf, tmp_path):
    hidden = tmp_path / "no-ray" / "ray"  # Ray not installed: its import fails as a missing module's does
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'ray'\", name='ray')\n")
    env = {"PYTHONPATH": os.pathsep.join(p for p in (str(hidden.parent), os.environ.get("PYTHONPATH")) if p)}
    root = repo.git_dir.parent
    world = tmp_path / "w"
    world.mkdir()
    (world / "a.txt").write_text("a\n")
    run_pf("snapshot", "--fs-root", world, "-q", cwd=root)
    before = sh("git", "for-each-ref", cwd=root).stdout
    _one_line(run_pf("fanout", "main", "-n", "2", "--executor", "ray", "--", "true", cwd=root, check=False, env=env),
              2, "git-pf[ray]")
    _one_line(run_pf("blame", "main", "--oracle", "true", "--executor", "ray", "--", "true", cwd=root, check=False,
                     env=env), 2, "git-pf[ray]")
    assert sh("git", "for-each-ref", cwd=root).stdout == before  # nothing was forked or written


def test_fanout_on_the_local_executor_scores_times_out_and_refuses_a_driver_path_for_the_cluster(repo, run_pf,
                                                                                                  tmp_path):
    root = repo.git_dir.parent
    world = tmp_path / "w"
    world.mkdir()
    (world / "a.txt").write_text("a\n")
    run_pf("snapshot", "--fs-root", world, "-q", cwd=root)
    cmd = ('echo "$GIT_PF_FORK" >> a.txt; case $GIT_PF_FORK in 1) echo "pf-score: 0.5";; '
           '2) echo "pf-score: nan"; exit 3;; 3) sleep 60;; 4) echo "pf-score: 2"; echo "pf-score: -1";; esac')
    out = json.loads(run_pf("fanout", "main", "-n", "4", "--timeout", "2", "--json", "--", "sh", "-c", cmd,
                            cwd=root).stdout)
    rows = {r["fork"]: r for r in out["forks"]}
    assert [r["fork"] for r in out["forks"]] == [1, 4, 2, 3]  # by score, best first; no score last, by fork
    assert rows[4]["score"] == -1 and rows[1]["score"] == 0.5 and rows[2]["score"] is None
    assert (rows[2]["exit"], rows[3]["exit"], rows[3]["timed_out"]) == (3, None, True)
    for k, r in rows.items():
        assert sh("git", "show", f"refs/pf/heads/main-fork-{k}:world/fs/a.txt", cwd=root).stdout == f"a\n{k}\n"
        assert sh("git", "rev-parse", f"refs/pf/heads/main-fork-{k}~1^", cwd=root).stdout.strip() == out["rev"]
    human = run_pf("fanout", "main", "-n", "1", "--", "sh", "-c", "echo pf-score: 7", cwd=root).stdout
    assert "best: main-fork-5 (git pf merge main-fork-5)" in human

    sh("git", "remote", "add", "origin", str(tmp_path / "elsewhere.git"), cwd=root)
    before = sh("git", "for-each-ref", cwd=root).stdout
    _one_line(run_pf("fanout", "main", "-n", "2", "--executor", "ray", "--", "true", cwd=root, check=False), 2,
              "is a path on this machine")
    assert sh("git", "for-each-ref", cwd=root).stdout == before


def _recorded(run_pf, root, fake):
    """A 4-step run of the blame tests' agent, whose step 3 reply is BUG; its agent, scoring itself."""
    from blame_helpers import AGENT, HERE, record

    record(run_pf, root, fake)
    scoring = (f"import os, pathlib, sys; sys.path.insert(0, {str(HERE.parent)!r}); import blame_helpers; "
               "blame_helpers.main(); w = pathlib.Path(os.environ['GIT_PF_WORLD']); "
               "print('pf-score:', sum('BUG' not in f.read_text() for f in w.glob('out-*.txt')))")
    return [AGENT[0], "-c", scoring]


def test_fanout_at_a_step_of_a_recorded_run_changes_each_forks_reply_and_scores_the_run_on(repo, run_pf,
                                                                                           tmp_path):
    from blame_helpers import REPLIES, by_step

    root = repo.git_dir.parent
    with FakeLLM(by_step(REPLIES)) as fake:
        agent = _recorded(run_pf, root, fake)
        out = json.loads(run_pf("fanout", "run", "--at-step", "3", "-n", "2", "--perturb", "blame_helpers:fix",
                                "--upstream", fake.url, "--json", "--", *agent, cwd=root,
                                env={"PYTHONPATH": os.pathsep.join([str(Path(__file__).parent),
                                                                     os.environ.get("PYTHONPATH", "")])}).stdout)
    assert [r["name"] for r in out["forks"]] == ["run-fork-1", "run-fork-2"]
    for r in out["forks"]:
        assert r["exit"] == 0 and r["score"] == 4  # BUG fixed at step 3: every out file is right
        files = sh("git", "show", f"{r['image']}:world/fs/out-3.txt", cwd=root).stdout
        assert files == "fixed"
        git = pygit2.Repository(str(repo.git_dir))
        assert at_step(git, r["image"], 2) == at_step(git, "refs/pf/heads/run", 2)  # steps 1-2: the run's own
        assert at_step(git, r["image"], 3) != at_step(git, "refs/pf/heads/run", 3)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """``(ray address, node dir, daemon base, daemon url, moto server)``, for the module."""
    tmp = tmp_path_factory.mktemp("cluster")
    base = tmp / "served"
    base.mkdir()
    with s3_helpers.moto_s3(tmp) as s3, git_daemon(base) as url, \
            ray_cluster(tmp, env=dict(s3_helpers.env(), PATH=PATH)) as (address, node):
        yield address, node, base, url, s3


def _remote(repo_root: Path, cluster, name: str) -> tuple[Path, str]:
    _, _, base, url, _ = cluster
    bare(base / f"{name}.git")
    sh("git", "remote", "add", "origin", f"{url}/{name}.git", cwd=repo_root)
    return base / f"{name}.git", f"{url}/{name}.git"


def test_fanout_of_16_forks_on_ray_pushes_each_world_as_its_image_and_sorts_by_score(repo, run_pf, tmp_path,
                                                                                    cluster):
    address, node, *_ = cluster
    root = repo.git_dir.parent
    served, url = _remote(root, cluster, "fanout")
    s3_helpers.config(root, cluster[4])
    sh("git", "config", "pf.largeFileThreshold", "1k", cwd=root)  # big.bin goes to the object store
    world = tmp_path / "w"
    world.mkdir()
    big = os.urandom(8192)
    (world / "big.bin").write_bytes(big)
    run_pf("snapshot", "--fs-root", world, "-q", cwd=root)
    cmd = ("wc -c < big.bin > size.txt; echo \"fork $GIT_PF_FORK\" > out.txt; "
           "echo noise; echo \"pf-score: $(( (GIT_PF_FORK * 7) % 16 ))\"")
    proc = run_pf("fanout", "main", "-n", "16", "--name", "try", "--executor", "ray", "--ray-address", address,
                  "--json", "--", "sh", "-c", cmd, cwd=root, env=s3_helpers.env())
    out = json.loads(proc.stdout)
    rows = out["forks"]
    assert sorted(r["fork"] for r in rows) == list(range(1, 17))
    assert [r["score"] for r in rows] == sorted((k * 7 % 16 for k in range(1, 17)), reverse=True)
    assert all(r["exit"] == 0 and r["ran"] for r in rows)
    on_remote = dict(line.split("\t")[::-1] for line in sh("git", "ls-remote", served, "refs/pf/heads/*").stdout.splitlines())
    for r in rows:
        name = f"refs/pf/heads/try-{r['fork']}"
        assert on_remote[name] == r["image"]
        assert sh("git", "rev-parse", name, cwd=root).stdout.strip() == r["image"]  # fetched back here
        tracking = f"refs/pf/remotes/origin/heads/try-{r['fork']}"
        assert sh("git", "rev-parse", tracking, cwd=root).stdout.strip() == r["image"]
        show = lambda path: sh("git", "show", f"{r['image']}:world/fs/{path}", cwd=root).stdout
        assert show("out.txt") == f"fork {r['fork']}\n" and show("size.txt").strip() == str(len(big))
        trailers = sh("git", "log", "-1", "--format=%B", r["image"], cwd=root).stdout
        assert f"Pf-Fanout-Score: {float(r['score'])!r}" in trailers and "Pf-Fanout-Exit: 0" in trailers
    # the workers worked in the node's own cache, fetched by URL; big.bin came from the bucket
    cache = node / "home" / ".cache" / "git-pf" / "remotes" / (hashlib.sha256(url.encode()).hexdigest()[:24] + ".git")
    assert cache.is_dir()
    # a task leaves one pack of its forks' images in the cache, not one per fork (16 forks: 4 tasks),
    # beside what the first task fetched
    assert len(list((cache / "objects" / "pack").glob("*.pack"))) <= 4 + 2
    assert any(r.method == "GET" for r in cluster[4].requests())


def _scripted_run(repo, tmp_path, monkeypatch):
    """A recorded run of the scripted agent whose fault step is 2 or later; (plan, fake server, agent)."""
    from git_pf.blame.validate import case_plan
    from git_pf.runs.record import record

    monkeypatch.setenv("PATH", PATH)  # the agent and oracle are 'python -m ...', as on a worker
    plan = next(p for p in (case_plan(0, c) for c in range(40)) if p.step >= 2 and p.steps <= 6)
    world = tmp_path / "world"
    world.mkdir()
    (world / scripted.TASK).write_bytes(scripted.task_json(plan.seed))
    agent = ["python", "-m", "git_pf.testing.scripted", "agent", "--task-seed", str(plan.seed)]
    fake = FakeLLM(scripted.ScriptedModel(plan))
    fake.__enter__()
    run = record(repo, agent, name="case", fs_root=world, upstreams=[fake.url])
    assert run.exit == 0 and run.steps == plan.steps
    return plan, fake, agent


def _blame(run_pf, root, plan, fake, agent, name, steps, k, *extra, **kw):
    oracle = f"python -m git_pf.testing.scripted check --task-seed {plan.seed}"
    return run_pf("blame", "case", "--oracle", oracle, "-k", str(k), "--steps", steps, "--perturb", "resample",
                  "--upstream", fake.url, "--no-mount", "--name", name, "--json", *extra, "--", *agent, cwd=root, **kw)


def test_blame_on_ray_equals_jobs_1_and_its_verdicts_are_on_the_remote(repo, run_pf, tmp_path, cluster, monkeypatch):
    address = cluster[0]
    root = repo.git_dir.parent
    served, _ = _remote(root, cluster, "blame")
    plan, fake, agent = _scripted_run(repo, tmp_path, monkeypatch)
    try:
        steps = f"{plan.step - 1}..{plan.step}"
        here = json.loads(_blame(run_pf, root, plan, fake, agent, "here", steps, 3, "--jobs", "1").stdout)
        there = json.loads(_blame(run_pf, root, plan, fake, agent, "there", steps, 3, "--executor", "ray",
                                  "--ray-address", address).stdout)
        # the driver crashed before it fetched the verdicts: the same command finds them on the remote
        for t in there["trials"]:
            sh("git", "update-ref", "-d", f"refs/pf/blame/there/step-{t['step']}/{t['trial']}", cwd=root)
        asked = len(fake.requests)
        again = json.loads(_blame(run_pf, root, plan, fake, agent, "there", steps, 3, "--executor", "ray",
                                  "--ray-address", address).stdout)
        assert len(fake.requests) == asked  # no trial ran again: none asked the model
        assert again["trials"] == there["trials"] and again["resumed"] == 0
    finally:
        fake.__exit__(None, None, None)
    outcomes = lambda s: [(t["step"], t["trial"], t["outcome"]) for t in s["trials"]]
    assert outcomes(there) == outcomes(here) and len(here["trials"]) == 6
    assert there["decisive"] == here["decisive"] == plan.step
    on_remote = sh("git", "ls-remote", served, "refs/pf/blame/there/*").stdout.splitlines()
    verdicts = {line.split("\t")[1]: line.split("\t")[0] for line in on_remote if "/step-" in line}
    assert verdicts == {f"refs/pf/blame/there/step-{t['step']}/{t['trial']}": t["commit"] for t in there["trials"]}
    assert not [line for line in on_remote if "/work/" in line]


def test_a_worker_killed_mid_trial_is_retried_and_every_verdict_comes_once(repo, run_pf, tmp_path, cluster,
                                                                            monkeypatch):
    address = cluster[0]
    root = repo.git_dir.parent
    served, _ = _remote(root, cluster, "killed")
    plan, fake, agent = _scripted_run(repo, tmp_path, monkeypatch)
    fake.delay_ms = 300  # live answers are slow, so a trial is still running when its worker is killed
    killed, over = [], threading.Event()
    killer = threading.Thread(target=kill_worker_running, args=("git_pf.testing.scripted agent", killed, over))
    killer.start()
    try:
        # 6 trials on 2 CPUs: 3 tasks of 2 trials each, so the kill loses a chunk's unpushed verdicts
        proc = _blame(run_pf, root, plan, fake, agent, "killed", f"{plan.step - 1}..{plan.step}", 3,
                      "--executor", "ray", "--ray-address", address, check=False)
    finally:
        over.set()
        killer.join()
        fake.__exit__(None, None, None)
    assert killed and proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    every = [(s, k) for s in (plan.step - 1, plan.step) for k in (1, 2, 3)]
    assert [(t["step"], t["trial"]) for t in out["trials"]] == every
    on_remote = sh("git", "ls-remote", served, "refs/pf/blame/killed/step-*").stdout.splitlines()
    assert sorted(line.split("\t")[1] for line in on_remote) == [f"refs/pf/blame/killed/step-{s}/{k}"
                                                                 for s, k in every]
    assert {line.split("\t")[0] for line in on_remote} == {t["commit"] for t in out["trials"]}


def test_fanout_at_a_step_on_ray_pushes_each_run_on_as_a_new_branch(repo, run_pf, tmp_path, cluster):
    from blame_helpers import REPLIES, by_step

    address = cluster[0]
    root = repo.git_dir.parent
    served, _ = _remote(root, cluster, "atstep")
    with FakeLLM(by_step(REPLIES)) as fake:
        agent = _recorded(run_pf, root, fake)
        out = json.loads(run_pf("fanout", "run", "--at-step", "3", "-n", "2", "--perturb", "drop", "--upstream",
                                fake.url, "--executor", "ray", "--ray-address", address, "--json", "--", *agent,
                                cwd=root).stdout)
    on_remote = dict(line.split("\t")[::-1] for line in sh("git", "ls-remote", served, "refs/pf/heads/*").stdout.splitlines())
    git = pygit2.Repository(str(repo.git_dir))
    for r in out["forks"]:
        assert r["exit"] == 0 and r["score"] == 4 and r["ran"]  # step 3's reply dropped: no BUG anywhere
        assert on_remote[f"refs/pf/heads/{r['name']}"] == r["image"] == str(git.references[f"refs/pf/heads/{r['name']}"].target)
        assert sh("git", "show", f"{r['image']}:world/fs/out-3.txt", cwd=root).stdout == ""
        assert at_step(git, r["image"], 2) == at_step(git, "refs/pf/heads/run", 2)


def test_fanout_of_an_image_the_remote_has_pushes_nothing_first_and_one_it_lost_is_pushed(repo, run_pf, tmp_path,
                                                                                          cluster):
    address = cluster[0]
    root = repo.git_dir.parent
    served, _ = _remote(root, cluster, "has-rev")
    sh("git", "config", "core.logAllRefUpdates", "always", cwd=served)  # the remote logs each write of a ref
    world = tmp_path / "w"
    world.mkdir()
    (world / "a.txt").write_text("a\n")
    run_pf("snapshot", "--fs-root", world, "-q", cwd=root)
    run_pf("push", "origin", "main", cwd=root)
    fan = lambda name: json.loads(run_pf("fanout", "main", "-n", "2", "--name", name, "--executor", "ray",
                                         "--ray-address", address, "--json", "--", "sh", "-c",
                                         "echo $GIT_PF_FORK > k.txt", cwd=root).stdout)["forks"]
    writes = lambda ref: len(sh("git", "reflog", "show", "--format=%H", ref, cwd=served).stdout.split())
    for r in fan("a"):  # main is on the remote: the workers fetch it, each fork's branch is written once
        assert sh("git", "rev-parse", f"refs/pf/heads/a-{r['fork']}", cwd=served).stdout.strip() == r["image"]
        assert writes(f"refs/pf/heads/a-{r['fork']}") == 1
    sh("git", "update-ref", "-d", "refs/pf/heads/main", cwd=served)  # this clone still thinks the remote has it
    for r in fan("b"):
        assert sh("git", "rev-parse", f"refs/pf/heads/b-{r['fork']}", cwd=served).stdout.strip() == r["image"]
        assert sh("git", "show", f"{r['image']}:world/fs/k.txt", cwd=root).stdout == f"{r['fork']}\n"


def test_a_worker_killed_mid_fanout_is_retried_and_every_fork_is_on_the_remote_once(repo, run_pf, tmp_path,
                                                                                     cluster):
    address = cluster[0]
    root = repo.git_dir.parent
    served, _ = _remote(root, cluster, "killedfanout")
    world = tmp_path / "w"
    world.mkdir()
    (world / "a.txt").write_text("a\n")
    run_pf("snapshot", "--fs-root", world, "-q", cwd=root)
    mark = tmp_path / "slept"
    cmd = (f"if [ \"$GIT_PF_FORK\" = 3 ] && [ ! -e {mark} ]; then touch {mark}; exec sleep 60; fi; "
           "echo \"pf-score: $GIT_PF_FORK\"")
    killed, over = [], threading.Event()
    # CMD has a session of its own: it outlives its worker, so it is killed too
    killer = threading.Thread(target=kill_worker_running, args=("sleep 60", killed, over, True))
    killer.start()
    try:
        proc = run_pf("fanout", "main", "-n", "8", "--name", "k", "--executor", "ray", "--ray-address", address,
                      "--json", "--", "sh", "-c", cmd, cwd=root, check=False)
    finally:
        over.set()
        killer.join()
    assert killed and proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)["forks"]
    assert sorted(r["fork"] for r in rows) == list(range(1, 9)) and all(r["exit"] == 0 for r in rows)
    on_remote = dict(line.split("\t")[::-1] for line in sh("git", "ls-remote", served, "refs/pf/heads/k-*").stdout.splitlines())
    assert on_remote == {f"refs/pf/heads/k-{r['fork']}": r["image"] for r in rows}
    for r in rows:  # each image is its fork's next one: a child of the fork this repository made
        fork = sh("git", "rev-parse", f"{r['image']}^", cwd=root).stdout.strip()
        assert "Pf-Fork: " in sh("git", "log", "-1", "--format=%B", fork, cwd=root).stdout
        assert sh("git", "rev-parse", f"refs/pf/heads/k-{r['fork']}", cwd=root).stdout.strip() == r["image"]


def test_a_chunks_forks_on_ray_each_see_a_fresh_world_not_the_fork_befores(repo, run_pf, tmp_path, cluster):
    from test_fanout_worlds import AGENT, check_forks, fanout_world

    address = cluster[0]
    root = repo.git_dir.parent
    _remote(root, cluster, "worlds")
    s3_helpers.config(root, cluster[4])  # big.bin goes to the bucket
    run_pf("snapshot", "--fs-root", fanout_world(root), "-q", cwd=root)
    # 8 forks on 2 CPUs: 4 chunks of 2, the second fork of each in the world the first left
    out = json.loads(run_pf("fanout", "main", "-n", "8", "--executor", "ray", "--ray-address", address, "--json",
                            "--", "sh", "-c", AGENT, cwd=root, env=s3_helpers.env()).stdout)
    assert all(r["ran"] for r in out["forks"])
    run_pf("checkout", "main", "--into", tmp_path / "fresh", cwd=root, env=s3_helpers.env())
    check_forks(root, out["forks"], tmp_path / "fresh")
