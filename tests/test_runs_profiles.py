"""Agent profiles and masks: volatile request fields left out of matching, stored with the run
(docs/record.md, "Profiles and masks").

Real components only: the fake LLM server, the real ``anthropic`` SDK in the agent, the real
``git-pf`` command."""
from __future__ import annotations

import json
import sys

from git_pf.testing.fakellm import FakeLLM
from runs_helpers import report, tape

# What the Claude Code CLI does to a request: a date in its system prompt, a session id in its metadata.
AGENT = """
import os, anthropic
ua = os.environ.get('AGENT_UA')
client = anthropic.Anthropic(api_key='sk-ant-test', max_retries=0,
                             default_headers={'User-Agent': ua} if ua else None)
m = client.messages.create(model='claude-x', max_tokens=10, metadata={'user_id': os.environ['AGENT_SESSION']},
                           system=[{'type': 'text', 'text': "You help. Today's date is " + os.environ['AGENT_DATE'] + '.'}],
                           messages=[{'role': 'user', 'content': 'run ' + os.environ.get('AGENT_RUN', '1')}])
print('reply', m.content[0].text)
"""
DAY1 = {"AGENT_DATE": "2026-11-27", "AGENT_SESSION": "session-aaa"}
DAY2 = {"AGENT_DATE": "2026-11-28", "AGENT_SESSION": "session-bbb"}
CLAUDE_UA = {"AGENT_UA": "claude-cli/2.0.14 (external, cli)"}


def _record(run_pf, root, name, env, *flags):
    with FakeLLM(["hello"]) as fake:
        return run_pf("record", "--name", name, "--upstream", fake.url, "--json", *flags, "--",
                      sys.executable, "-c", AGENT, cwd=root, env=env)


def _replay(run_pf, root, name, env, *flags):
    proc = run_pf("replay", name, "--json", *flags, "--", sys.executable, "-c", AGENT, cwd=root, env=env,
                  check=False)
    assert "{" in proc.stdout, proc.stderr
    return proc, report(proc.stdout)


def test_the_profile_picked_from_the_user_agent_is_stored_and_replay_uses_it_with_no_flags(repo, run_pf):
    root = repo.git_dir.parent
    _record(run_pf, root, "cc", dict(DAY1, **CLAUDE_UA))
    [entry] = [e for e in tape(root, "refs/pf/heads/cc") if e.get("kind") == "exchange"]
    assert entry["match"]["profile"] == "claude-code" and "$.metadata.user_id" in entry["match"]["ignore"]
    from test_report import parse  # the report shows the rules the run stored

    shown = parse(run_pf("report", "cc", "-o", "-", cwd=root).stdout)[1]["match"]
    assert shown["profiles"] == ["claude-code"] and shown["ignore"] == ["$.metadata.user_id"] and len(shown["mask"]) > 5
    # the next day, another session: only the date and the session id differ, and they are masked
    proc, out = _replay(run_pf, root, "cc", dict(DAY2, **CLAUDE_UA))
    assert proc.returncode == 0 and out["bit_exact"] is True, proc.stderr
    # what is not volatile still counts
    proc, out = _replay(run_pf, root, "cc", dict(DAY2, AGENT_RUN="2", **CLAUDE_UA))
    assert proc.returncode == 1 and out["mismatch"]["diff"][0]["path"] == "$.messages[0].content"


def test_without_a_profile_the_date_is_a_mismatch_and_flags_mask_it(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    _record(run_pf, root, "plain", DAY1)
    assert all("match" not in e for e in tape(root, "refs/pf/heads/plain"))
    proc, out = _replay(run_pf, root, "plain", DAY2)
    assert proc.returncode == 1 and out["bit_exact"] is False
    paths = [d["path"] for d in out["mismatch"]["diff"]]
    assert paths == ["$.metadata.user_id", "$.system[0].text"]
    proc, out = _replay(run_pf, root, "plain", DAY2, "--profile", "claude-code")
    assert out["bit_exact"] is True, proc.stderr
    proc, out = _replay(run_pf, root, "plain", DAY2, "--ignore-field", "$.metadata.user_id",
                        "--mask", "$.system[*].text=Today.s date is [0-9-]+")
    assert out["bit_exact"] is True, proc.stderr
    proc, out = _replay(run_pf, root, "plain", DAY2, "--ignore-field", "$.metadata.user_id")
    [d] = out["mismatch"]["diff"]
    assert d["path"] == "$.system[0].text" and "2026-11-27" in d["recorded"] and "2026-11-28" in d["live"]


def test_a_users_profile_file_is_stored_with_the_run(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    toml = tmp_path / "mine.toml"
    toml.write_text("name = \"mine\"\nignore = [\"$.metadata\"]\n"
                    "mask = ['$.system=[0-9]{4}-[0-9]{2}-[0-9]{2}', '$.messages[*].content=run [0-9]+']\n")
    _record(run_pf, root, "mine", DAY1, "--profile", toml)
    [entry] = [e for e in tape(root, "refs/pf/heads/mine") if e.get("kind") == "exchange"]
    assert entry["match"]["profile"] == "mine"
    proc, out = _replay(run_pf, root, "mine", dict(DAY2, AGENT_RUN="7"))
    assert out["bit_exact"] is True, proc.stderr
    # the same profile as JSON, given to replay only
    (tmp_path / "mine.json").write_text(json.dumps({"ignore": ["$.metadata"], "mask": ["$=date is [0-9-]+"]}))
    _record(run_pf, root, "other", DAY1)
    proc, out = _replay(run_pf, root, "other", DAY2, "--profile", tmp_path / "mine.json")
    assert out["bit_exact"] is True, proc.stderr
    # a malformed profile or mask is one line and exit 2, before anything runs
    (tmp_path / "bad.toml").write_text("ignore = [\"$.metadata\"]\nmasks = []\n")
    for flags, words in ((("--profile", tmp_path / "bad.toml"), "unknown key 'masks'"),
                         (("--profile", "no-such-agent"), "no profile 'no-such-agent'"),
                         (("--mask", "$.system"), "JSONPATH=REGEX"),
                         (("--mask", "$.system=("), "not a regular expression")):
        proc = run_pf("replay", "other", *flags, "--", "true", cwd=root, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and words in proc.stderr, proc.stderr


def test_masks_reach_strings_at_any_depth_below_their_path():
    from git_pf.layers.trace.matching import Rules, diff_requests, request_key

    a = json.dumps({"system": [{"type": "text", "text": "cwd: /a/b\nToday's date is 2026-01-01."}], "n": 1}).encode()
    b = json.dumps({"system": [{"type": "text", "text": "cwd: /c\nToday's date is 2027-02-02."}], "n": 1}).encode()
    rules = Rules((), ("$.system=Today.s date is [0-9-]+", "$.system[*].text=cwd: [^\\n]*"))
    assert request_key("POST", "/v1/messages", a, rules) == request_key("POST", "/v1/messages", b, rules)
    assert request_key("POST", "/v1/messages", a) != request_key("POST", "/v1/messages", b)
    [d] = diff_requests({"method": "POST", "path": "/p", "body": a}, {"method": "POST", "path": "/p", "body": b},
                        Rules((), ("$.system=Today.s date is [0-9-]+",)))
    assert d["recorded"] == "cwd: /a/b\n<masked>." and d["live"] == "cwd: /c\n<masked>."


def test_a_fork_runs_on_with_the_runs_stored_masks(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    (tmp_path / "reply.txt").write_text("Changed.")
    for name, env in (("cc", dict(DAY1, **CLAUDE_UA)), ("plain", DAY1)):
        _record(run_pf, root, name, env)
        run_pf("fork", name, "--at-step", "1", "--response", tmp_path / "reply.txt", "--name", f"{name}-fork", cwd=root)
    with FakeLLM(["live"]) as fake:
        # the next day: the prefix (step 1, changed) still matches under the masks the recording stored
        ran = run_pf("run", "cc-fork", "--upstream", fake.url, "--", sys.executable, "-c", AGENT, cwd=root,
                     env=dict(DAY2, **CLAUDE_UA), check=False)
        assert ran.returncode == 0 and "reply Changed." in ran.stdout, ran.stderr
        ran = run_pf("run", "plain-fork", "--upstream", fake.url, "--", sys.executable, "-c", AGENT, cwd=root,
                     env=DAY2, check=False)
        assert ran.returncode == 1 and "mismatch" in ran.stderr and "$.metadata.user_id" in ran.stderr
        ran = run_pf("run", "plain-fork", "--upstream", fake.url, "--profile", "claude-code", "--", sys.executable,
                     "-c", AGENT, cwd=root, env=DAY2, check=False)
        assert ran.returncode == 0 and "reply Changed." in ran.stdout, ran.stderr
        assert fake.requests == []  # every answer came from the tape


def test_a_built_in_profile_is_picked_by_the_user_agent_its_agent_sends():
    from git_pf.runs.profiles import detect

    assert detect("claude-cli/2.1.332 (external, cli)").name == "claude-code"
    assert detect("Agents/Python 0.24.0").name == "openai-agents"
    assert detect("langchain-openai/1.0 OpenAI/Python 2.0").name == "langgraph"
    assert detect("OpenAI/Python 2.0.0") is None and detect(None) is None
