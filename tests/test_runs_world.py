"""Runs from step 0 and the world check: an agent on the real openai SDK with tools that are not
idempotent (an append, a str_replace edit, ``git commit`` and ``mkdir`` in the world) forked and run
on, replayed, and replayed broken. Real components: the fake LLM server, the proxy, the CLI, git."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from blame_helpers import by_step
from git_pf.testing.fakellm import FakeLLM
from runs_helpers import git, report, step_ids
import tool_agent

AGENT = [sys.executable, str(Path(tool_agent.__file__).resolve())]


def record(run_pf, root: Path, world: Path, name: str = "run"):
    tool_agent.seed(world)
    with FakeLLM(by_step(tool_agent.STEPS)) as fake:
        return run_pf("record", "--name", name, "--fs-root", world, "--upstream", fake.url, "--", *AGENT, cwd=root)


def show(root: Path, rev: str, path: str) -> str:
    return git(root, "cat-file", "blob", f"{rev}:world/fs/{path}")


def test_a_fork_runs_on_from_step_0_and_every_prefix_world_is_the_recordings(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    record(run_pf, root, tmp_path / "sb")
    original = step_ids(root, "run")
    (tmp_path / "reply.txt").write_text("append: div")
    run_pf("fork", "run", "--at-step", "4", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    with FakeLLM(by_step(tool_agent.STEPS)) as live:
        proc = run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--json", "--", *AGENT,
                      cwd=root, check=False)
        assert len(live.requests) == 2  # steps 1-4 from the tape (each prefix world checked), 5 and 6 live
    assert proc.returncode == 0, proc.stderr
    assert report(proc.stdout)["steps"] == 2
    now = step_ids(root, "alt")
    # the agent redid the prefix in step 0's world: one add, the edit made once, one commit, then div
    assert show(root, now[5], "CHANGELOG.md") == "add\ndiv\n"
    assert show(root, now[5], "notes.md") == "done: write the notes\n"
    assert (tmp_path / "w" / "CHANGELOG.md").read_text() == "add\ndiv\nmul\n"
    log = subprocess.run(["git", "-C", str(tmp_path / "w"), "log", "--format=%s"], capture_output=True, text=True)
    assert log.stdout.split() == ["first"]
    for s in range(5):  # the prefix steps are the recording's own images, world and all
        assert now[s] == original[s] or s == 4
    assert git(root, "rev-parse", f"{now[4]}:world/fs") == git(root, "rev-parse", f"{original[4]}:world/fs")
    # --resume-world keeps the old behaviour, for agents that restore their own state: this one redoes
    # the prefix over step 4's world, so it finds a CHANGELOG.md it has not written yet and asks otherwise
    run_pf("fork", "run", "--at-step", "4", "--response", tmp_path / "reply.txt", "--name", "old", cwd=root)
    proc = run_pf("run", "old", "--resume-world", "--fs-root", tmp_path / "w2", "--", *AGENT, cwd=root, check=False)
    assert proc.returncode == 1 and "mismatch before the fork's step: step 1:" in proc.stderr
    assert (tmp_path / "w2" / "CHANGELOG.md").read_text() == "add\n"


def test_the_world_check_names_the_step_and_the_file_of_one_extra_byte(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    record(run_pf, root, tmp_path / "sb")
    good = run_pf("replay", "run", "--json", "--", *AGENT, cwd=root)
    out = report(good.stdout)
    assert out["bit_exact"] is True and out["world_divergence"] is None and out["world_checked"] is True
    broken = run_pf("replay", "run", "--json", "--", *AGENT, cwd=root, env={"TOOL_AGENT_EXTRA": "3"}, check=False)
    assert broken.returncode == 1
    [line] = [l for l in broken.stderr.splitlines() if l.startswith("git pf")]
    assert line == "git pf: error: replay divergence: step 3: the world differs: CHANGELOG.md (1 line added)"
    out = report(broken.stdout)
    assert out["bit_exact"] is False and out["world_divergence"]["step"] == 3
    assert out["world_divergence"]["paths"] == ["CHANGELOG.md"] and "\n+!" in out["world_divergence"]["patch"]
    assert out["draws"]["consumed"] is None  # the agent was stopped before it could say: unknown, not 0
    unchecked = run_pf("replay", "run", "--no-world-check", "--json", "--", *AGENT, cwd=root,
                       env={"TOOL_AGENT_EXTRA": "3"})
    assert report(unchecked.stdout)["world_checked"] is False and report(unchecked.stdout)["bit_exact"] is True


def test_a_failed_run_leaves_its_branch_and_a_run_with_no_new_step_keeps_the_trace(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    record(run_pf, root, tmp_path / "sb")
    (tmp_path / "reply.txt").write_text("append: div")
    run_pf("fork", "run", "--at-step", "4", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    tip = git(root, "rev-parse", "refs/pf/heads/alt").strip()
    proc = run_pf("run", "alt", "--", *AGENT, cwd=root, env={"TOOL_AGENT_EXTRA": "2"}, check=False)
    assert proc.returncode == 1
    [line] = [l for l in proc.stderr.splitlines() if l.startswith("git pf")]
    assert line.startswith("git pf: error: run divergence before the fork's step: step 2: the world differs: CHANGELOG.md")
    assert git(root, "rev-parse", "refs/pf/heads/alt").strip() == tip  # no "run end: exit 143" image
    # a fork at the last step whose agent sends nothing more: the end image keeps the fork's trace
    (tmp_path / "last.txt").write_text("plain words")
    run_pf("fork", "run", "--at-step", "6", "--response", tmp_path / "last.txt", "--name", "end", cwd=root)
    fork_tip = git(root, "rev-parse", "refs/pf/heads/end").strip()
    run_pf("run", "end", "--", *AGENT, cwd=root)
    end = git(root, "rev-parse", "refs/pf/heads/end").strip()
    assert end != fork_tip
    messages = git(root, "cat-file", "blob", f"{end}:trace/messages.jsonl")
    assert messages == git(root, "cat-file", "blob", f"{fork_tip}:trace/messages.jsonl") and messages.count("\n") >= 12


def test_a_tool_subprocess_drawing_uuid4_leaves_the_agents_draws_unchanged(repo, run_pf, tmp_path):
    """A shell agent (no hook of its own) whose tool is a Python process that draws: no draw is the agent's."""
    root, script = repo.git_dir.parent, tmp_path / "agent.sh"
    tool = f"'{sys.executable}' -c 'import random, uuid; print(uuid.uuid4(), random.random())'"
    script.write_text(f"{tool}\ncurl -sf -X POST \"$OPENAI_BASE_URL/chat/completions\" -H 'content-type: "
                      "application/json' -d '{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}'"
                      f"\n{tool}\n")
    (tmp_path / "sb").mkdir()
    with FakeLLM(["hello"]) as fake:
        run_pf("record", "--name", "run", "--fs-root", tmp_path / "sb", "--upstream", fake.url, "--", "sh", script,
               cwd=root)
    entries = [e for e in tape_of(root) if e["kind"] in ("exchange", "end")]
    assert len(entries) == 2 and all(e["draws"] == [] for e in entries)
    out = report(run_pf("replay", "run", "--json", "--", "sh", script, cwd=root).stdout.split("\n", 2)[-1])
    assert out["bit_exact"] is True and out["draws"] == {"consumed": 0, "of": 0}


def tape_of(root: Path) -> list[dict]:
    from runs_helpers import tape
    return tape(root, "refs/pf/heads/run")


def test_a_decorated_tool_answered_from_the_ledger_makes_its_world_change_again(repo, run_pf, tmp_path):
    """The tool is ``@git_pf.tool``: replay never runs its body, yet the agent reads back what it wrote
    (CHANGELOG.md's lines in every request) and every step's world is the recording's."""
    root, decorated = repo.git_dir.parent, {"TOOL_AGENT_DECORATED": "1"}
    tool_agent.seed(tmp_path / "sb")
    with FakeLLM(by_step(tool_agent.STEPS)) as fake:
        run_pf("record", "--name", "run", "--fs-root", tmp_path / "sb", "--upstream", fake.url, "--", *AGENT,
               cwd=root, env=decorated)
    ledger = [json.loads(l) for l in git(root, "cat-file", "blob", "refs/pf/heads/run:effects/ledger.jsonl").splitlines()]
    assert [e["tool"] for e in ledger] == ["act"] * 6
    assert ledger[0]["world"] == [{"path": "CHANGELOG.md", "blob": git(root, "rev-parse", f"{step_ids(root, 'run')[2]}:world/fs/CHANGELOG.md").strip(), "mode": "100644"}]
    played = run_pf("replay", "run", "--keep-world", "--json", "--", *AGENT, cwd=root, env=decorated, check=False)
    out = report(played.stdout)
    assert played.returncode == 0, played.stderr
    assert out["bit_exact"] is True and out["effects"] == {"replayed": 6, "of": 6} and out["world_divergence"] is None
    assert Path(out["world"], "CHANGELOG.md").read_text() == "add\nsub\nmul\n"
    assert Path(out["world"], "notes.md").read_text() == "done: write the notes\n"
    shutil.rmtree(out["world"])


def files(directory: Path) -> dict[str, bytes]:
    return {str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()}


def test_an_agent_writing_by_absolute_path_leaves_the_real_project_byte_identical(repo, run_pf, tmp_path):
    """The agent writes into the recorded project by its absolute path, not $GIT_PF_WORLD: replay, run and a
    blame trial show it their world at that path, in a private mount namespace."""
    root, project = repo.git_dir.parent, tmp_path / "project"
    by_path = {"TOOL_AGENT_ABS": str(project)}
    tool_agent.seed(project)
    with FakeLLM(by_step(tool_agent.STEPS)) as fake:
        run_pf("record", "--name", "run", "--fs-root", project, "--upstream", fake.url, "--", *AGENT, cwd=root,
               env=by_path)
    before = files(project)
    assert before["CHANGELOG.md"] == b"add\nsub\nmul\n"
    played = run_pf("replay", "run", "--keep-world", "--json", "--", *AGENT, cwd=root, env=by_path)
    out = report(played.stdout)
    assert out["bit_exact"] is True and Path(out["world"], "CHANGELOG.md").read_text() == "add\nsub\nmul\n"
    shutil.rmtree(out["world"])
    assert files(project) == before
    (tmp_path / "reply.txt").write_text("append: div")
    run_pf("fork", "run", "--at-step", "4", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)
    with FakeLLM(by_step(tool_agent.STEPS)) as live:
        run_pf("run", "alt", "--upstream", live.url, "--fs-root", tmp_path / "w", "--", *AGENT, cwd=root, env=by_path)
        assert (tmp_path / "w" / "CHANGELOG.md").read_text() == "add\ndiv\nmul\n"
        assert files(project) == before
        proc = run_pf("blame", "run", "--oracle", "grep -q div CHANGELOG.md", "-k", "1", "--steps", "4..4",
                      "--perturb", "none", "--upstream", live.url, "--no-mount", "--", *AGENT, cwd=root, env=by_path,
                      check=False)
    assert proc.returncode == 0, proc.stderr
    assert "step 4 trial 1: no-flip" in proc.stderr
    assert files(project) == before
    # without isolation the agent reads the real project by that path (its 3 lines), so it asks otherwise
    proc = run_pf("replay", "run", "--no-isolate", "--", *AGENT, cwd=root, env=by_path, check=False)
    assert proc.returncode == 1 and "replay mismatch: step 1:" in proc.stderr
    # where no mount namespace can be made (here: no unshare on PATH) the replay is refused in one line
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "sh"):
        (bare / tool).symlink_to(shutil.which(tool))
    proc = run_pf("replay", "run", "--", *AGENT, cwd=root, check=False,
                  env=dict(by_path, PATH=f"{Path(sys.executable).parent}:{bare}"))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--no-isolate" in proc.stderr, proc.stderr
    assert files(project) == before


def test_a_prefix_problem_says_whether_it_was_before_at_or_after_the_forks_step():
    from git_pf.runs.runon import prefix_where

    assert [prefix_where(s, 5) for s in (4, 5, 6)] == ["before the fork's step", "at the fork's step",
                                                       "after the fork's step"]


def test_blame_of_the_sdk_agent_names_its_fault_step_and_the_control_names_none(repo, run_pf, tmp_path):
    """A transient fault at step 3 (the model says to append BUG, once): every trial redoes the prefix
    from step 0 with tools that are not idempotent, and the oracle runs in the trial's world."""
    root, asked = repo.git_dir.parent, []

    def model(api, request, n):
        i = sum(1 for m in request.get("messages", []) if m.get("role") == "user")
        if i == 3:
            asked.append(i)
            if len(asked) == 1:
                return "append: BUG"
        return tool_agent.STEPS[i - 1] if 0 < i <= len(tool_agent.STEPS) else "done"

    tool_agent.seed(tmp_path / "sb")
    with FakeLLM(model) as fake:
        run_pf("record", "--name", "run", "--fs-root", tmp_path / "sb", "--upstream", fake.url, "--", *AGENT, cwd=root)
        common = ("--oracle", "! grep -q BUG CHANGELOG.md", "-k", "3", "--steps", "2..4", "--upstream", fake.url,
                  "--no-mount", "--json")
        found = json.loads(run_pf("blame", "run", *common, "--perturb", "resample", "--", *AGENT, cwd=root).stdout)
        control = json.loads(run_pf("blame", "run", *common, "--perturb", "none", "--name", "control", "--", *AGENT,
                                    cwd=root).stdout)
    assert found["decisive"] == 3
    assert {r["step"]: (r["flips"], r["undefined"]) for r in found["steps"]} == {2: (0, 0), 3: (3, 0), 4: (0, 0)}
    assert control["decisive"] is None and all(r["flips"] == 0 and r["undefined"] == 0 for r in control["steps"])


def test_a_run_recorded_without_a_sandbox_has_no_world_to_check(repo, run_pf, tmp_path):
    """Replay gives every agent a world ($GIT_PF_WORLD); one recorded without --fs-root had none, so what
    it writes there is no divergence."""
    root, script = repo.git_dir.parent, tmp_path / "agent.sh"
    script.write_text("curl -sf -X POST \"$OPENAI_BASE_URL/chat/completions\" -H 'content-type: application/json' "
                      "-d '{\"model\":\"m\",\"messages\":[]}' >/dev/null\n"
                      "[ -z \"$GIT_PF_WORLD\" ] || echo written > \"$GIT_PF_WORLD/out.txt\"\n")
    with FakeLLM(["hello"]) as fake:
        run_pf("record", "--name", "run", "--upstream", fake.url, "--", "sh", script, cwd=root)
    out = report(run_pf("replay", "run", "--json", "--", "sh", script, cwd=root).stdout)
    assert out["bit_exact"] is True and out["world_checked"] is False


def test_blame_takes_the_start_world_check_and_isolation_flags_of_run(repo, run_pf, tmp_path):
    """``blame`` goes on from its forks as ``run`` does, and takes the same flags: ``--resume-world``
    (a setting of the blame run: resuming with another start is refused), ``--no-world-check`` and
    ``--no-isolate`` (where no mount namespace can be made, blame is refused in one line without it)."""
    root = repo.git_dir.parent
    record(run_pf, root, tmp_path / "sb")
    common = ("--oracle", "grep -q div CHANGELOG.md", "-k", "1", "--steps", "4..4", "--perturb", "none",
              "--no-mount", "--json")

    def outcome(proc) -> tuple[int, int]:
        assert proc.returncode == 0, proc.stderr
        [row] = json.loads(proc.stdout)["steps"]
        return row["flips"], row["undefined"]

    with FakeLLM(by_step(tool_agent.STEPS)) as live:
        ups = ("--upstream", live.url)
        # from step 0, an extra byte at step 3 is a world the recording did not have: undefined
        extra = {"TOOL_AGENT_EXTRA": "3"}
        assert outcome(run_pf("blame", "run", *common, *ups, "--name", "checked", "--", *AGENT, cwd=root,
                              env=extra, check=False)) == (0, 1)
        assert outcome(run_pf("blame", "run", *common, *ups, "--name", "unchecked", "--no-world-check", "--",
                              *AGENT, cwd=root, env=extra, check=False)) == (0, 0)
        # from step 4's world this agent (which redoes its prefix) finds a CHANGELOG.md it has not written
        # yet and asks otherwise before the fork's step: undefined, where from step 0 it is a plain trial
        resumed = run_pf("blame", "run", *common, *ups, "--name", "resumed", "--resume-world", "--", *AGENT,
                         cwd=root, check=False)
        assert outcome(resumed) == (0, 1)
        assert "before the fork's step" in run_pf("show", "refs/pf/blame/resumed/step-4/1", cwd=root).stdout
        assert outcome(run_pf("blame", "run", *common, *ups, "--name", "plain", "--", *AGENT, cwd=root,
                              check=False)) == (0, 0)
        again = run_pf("blame", "run", *common, *ups, "--name", "resumed", "--", *AGENT, cwd=root, check=False)
        assert again.returncode == 2 and "other settings (resume_world)" in again.stderr
    # where no mount namespace can be made (no unshare on PATH) and the recorded sandbox is there
    bare = tmp_path / "bin"
    bare.mkdir()
    for tool in ("git", "sh", "grep"):
        (bare / tool).symlink_to(shutil.which(tool))
    env = {"PATH": f"{Path(sys.executable).parent}:{bare}"}
    proc = run_pf("blame", "run", *common, "--name", "noiso", "--", *AGENT, cwd=root, env=env, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--no-isolate" in proc.stderr, proc.stderr
    assert not [r for r in subprocess.run(["git", "for-each-ref", "refs/pf/blame/noiso/"], cwd=root,
                                          capture_output=True, text=True).stdout.splitlines()]
