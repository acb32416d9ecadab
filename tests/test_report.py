"""``git pf report``: the HTML file of a recorded run, read back without a browser (html.parser and
the embedded JSON). Real components: runs recorded against the fake LLM server with the demo agent on
the real SDKs, ``git pf fork --at-step``, ``git pf replay``, blame refs written with git itself, the
real CLI. The page in a browser is tests/test_report_browser.py's."""
from __future__ import annotations

import json
import os
import re
import subprocess
from html.parser import HTMLParser

import pytest

from conftest import BIN, git_fsck_clean

from git_pf.runs.llm import wire
from git_pf.testing.fakellm import FakeLLM
from runs_helpers import agent_cmd, git, record, report, step_ids, tape

HOSTILE = "</script><script>alert(1)</script> <img src=x onerror=alert(2)> \u2028&amp;"
BIG = "".join(f"line {i} of a big file\n" for i in range(3000))
# step 3 says something hostile; step 4 writes a big text file and a binary one
HOSTILE_SCRIPT = ["I will keep notes.", {"tool": "read_file", "args": {"path": "task.md"}}, HOSTILE,
                  {"tool": "write_file", "args": {"path": "big.txt", "content": BIG}},
                  {"tool": "write_file", "args": {"path": "blob.bin", "content": "\u0000\u0001binary\u0000"}},
                  "All done."]


class Page(HTMLParser):
    """Every element's attributes, each script's attributes and text, and the text outside scripts."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.scripts: list[tuple[dict, str]] = []
        self._in: dict | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "script":
            self._in = dict(attrs)
            self.scripts.append((self._in, ""))

    def handle_endtag(self, tag):
        if tag == "script":
            self._in = None

    def handle_data(self, data):
        if self._in is not None:
            attrs, text = self.scripts[-1]
            self.scripts[-1] = (attrs, text + data)


def parse(text: str) -> tuple[Page, dict]:
    page = Page()
    page.feed(text)
    page.close()
    found = [t for a, t in page.scripts if a.get("type") == "application/json" and a.get("id") == "pf-data"]
    assert len(found) == 1
    return page, json.loads(found[0])


def no_request(text: str, page: Page) -> None:
    """Nothing in the page loads or sends anything: no URL in any attribute or url(), no fetch / XHR."""
    data = next(t for a, t in page.scripts if a.get("id") == "pf-data")
    code = text.replace(data, "")
    assert "://" not in data  # this run's tape holds no URL; the page's code none at all:
    assert not re.search(r"(?i)(https?|ftp|wss?|file|data|javascript):|[\"'(=]\s*//", code)
    assert "url(" not in code and "@import" not in code
    assert not re.search(r"fetch|XMLHttpRequest|WebSocket|EventSource|sendBeacon|innerHTML|outerHTML|eval\(|Function\(", code)
    for tag, attrs in page.tags:
        assert not {"src", "href", "action", "srcset", "poster", "data"} & attrs.keys(), (tag, attrs)
    assert [t for t, _ in page.tags if t in ("link", "img", "iframe", "object", "embed", "form", "base")] == []
    csp = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0] and "connect-src 'none'" in csp[0]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One recorded run 'run' (6 steps, a hostile reply at step 3, a big and a binary file written),
    'alt' forked from it at step 3 and 'alt2' forked from alt at step 3, a finished blame run of 'run'
    (as refs), a replay report with a mismatch at step 1, and an unrelated plain image 'plain'."""
    from git_pf import Repo

    tmp = tmp_path_factory.mktemp("report")
    root = tmp / "repo"
    Repo.init(root)
    run_pf = _runner(tmp)
    with FakeLLM(HOSTILE_SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp / "sb", "--stream", "--steps", "6", effects=tmp / "fx")
    (tmp / "reply.txt").write_text("Changed my mind.")
    run_pf("fork", "run", "--at-step", "3", "--response", tmp / "reply.txt", "--name", "alt", cwd=root)
    run_pf("fork", "alt", "--at-step", "3", "--response", tmp / "reply.txt", "--name", "alt2", cwd=root)
    (tmp / "plain").mkdir()
    (tmp / "plain" / "a.txt").write_text("a")
    run_pf("snapshot", "--fs-root", tmp / "plain", "--name", "plain", cwd=root)
    write_blame(root, "run", {2: ["no-flip"] * 5, 3: ["flip"] * 5, 4: ["no-flip", "no-flip", "flip", "undefined", "no-flip"]})
    proc = run_pf("replay", "run", "--json", "--", *agent_cmd("openai.chat", tmp / "x", "--stream", "--plain-prompts",
                                                             effects=tmp / "fx"), cwd=root, check=False)
    assert proc.returncode == 1
    (tmp / "replay.json").write_text(json.dumps(report(proc.stdout)))
    yield root, run_pf, tmp
    git_fsck_clean(root)


def _runner(cwd):
    """conftest's ``run_pf`` for a module-scoped fixture."""
    def run(*args, cwd=cwd, check=True, env=None):
        env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", **(env or {}))
        proc = subprocess.run(["git-pf", *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env)
        if check and proc.returncode != 0:
            raise AssertionError(f"git-pf {' '.join(map(str, args))} exited {proc.returncode}: {proc.stderr}")
        return proc
    return run


def write_report(run_pf, root, rev, out, *args):
    proc = run_pf("report", rev, "-o", out, "--json", *args, cwd=root)
    said = json.loads(proc.stdout)
    text = out.read_text(encoding="utf-8")
    assert said["path"] == str(out.resolve()) and said["bytes"] == len(text.encode()) and proc.stderr == ""
    return said, text


def test_the_report_holds_each_step_its_exchange_world_diff_effects_and_forks(runs, tmp_path):
    root, run_pf, _ = runs
    said, text = write_report(run_pf, root, "run", tmp_path / "r.html")
    page, data = parse(text)
    no_request(text, page)
    assert said["steps"] == 6 and data["branch"] == "run"
    ids, entries = step_ids(root, "run"), {e["step"]: e for e in tape(root, "refs/pf/heads/run") if e["kind"] == "exchange"}
    assert [s["step"] for s in data["steps"]] == list(range(7)) and [s["commit"] for s in data["steps"]] == \
        [ids[n] for n in range(7)]
    assert data["steps"][0]["exchange"] is None and data["end"]["exit"] == 0
    for n in range(1, 7):
        ex = data["steps"][n]["exchange"]
        assert ex["streamed"] and ex["status"] == 200 and ex["path"] == "/v1/chat/completions"
        assert ex["text"] == wire.reply_text(entries[n])  # the event stream reassembled
        request = json.loads(ex["request"]) if "characters cut" not in ex["request"] else None
        if request:
            assert request["body"]["messages"][-1]["content"] == json.loads(entries[n]["request"]["body"]["text"])["messages"][-1]["content"]
        if "characters cut" not in ex["response"]:
            assert json.loads(ex["response"])["stream"]["chunks"] == len(entries[n]["response"]["chunks"])
        assert len(ex["request"]) < 6100 and len(ex["response"]) < 6100
    assert data["steps"][2]["exchange"]["tools"] == ["read_file"]
    # the hostile reply is data: the parsed JSON holds it exactly, the file only escaped
    assert data["steps"][3]["exchange"]["text"] == HOSTILE
    assert "<script>alert" not in text and "<img" not in text and "\u2028" not in text
    assert "\\u003c/script\\u003e\\u003cscript\\u003ealert(1)" in text and "onerror=alert(2)\\u003e" in text
    assert len([a for a, _ in page.scripts]) == 2 and all("src" not in a for a, _ in page.scripts)
    # world diffs: each step against the one before
    world = {n: data["steps"][n]["world"] for n in range(7)}
    assert "task.md" in world[0]["added"] and world[0]["patches"] == []
    assert world[4]["added"] == ["notes/step-03.txt"] and world[4]["changed"] == ["log.txt"]
    note = {p["path"]: p for p in world[4]["patches"]}["notes/step-03.txt"]
    assert "+" + HOSTILE in note["patch"] and not note["cut"] and not note["binary"]
    patch4 = {p["path"]: p for p in world[5]["patches"]}
    assert patch4["big.txt"]["cut"] and "characters cut" in patch4["big.txt"]["patch"]
    assert "+line 0 of a big file" in patch4["big.txt"]["patch"] and "+line 2999 of a big file" in patch4["big.txt"]["patch"]
    assert len(patch4["big.txt"]["patch"]) < len(BIG) // 2
    patch5 = {p["path"]: p for p in world[6]["patches"]}
    assert patch5["blob.bin"]["binary"] and patch5["blob.bin"]["patch"] == "" and "blob.bin" in world[6]["added"]
    # effects: the ledger of the tip, and how much of it each step held
    assert [e["tool"] for e in data["ledger"]] == ["notify"] and data["ledger"][0]["class"] == "irreversible"
    counts = [s["effects"] for s in data["steps"]]
    assert counts == sorted(counts) and counts[0] == 0 and counts[-1] == 1
    # the fork graph: run's line, alt forked at step 3 and alt2 forked from alt, by git ancestry
    graph = data["fork_graph"]
    nodes = {n["id"]: n for n in graph["nodes"]}
    alt, alt2 = step_ids(root, "alt"), step_ids(root, "alt2")
    assert nodes[alt[3]]["branches"] == ["alt"] and nodes[alt2[3]]["branches"] == ["alt2"]
    assert nodes[alt[3]]["step"] == 3 and nodes[alt[3]]["row"] == nodes[ids[3]]["row"] and nodes[alt[3]]["lane"] > 0
    assert [ids[2], alt[3]] in graph["edges"] and [ids[2], alt2[3]] in graph["edges"]
    assert "run" in nodes[data["tip"]]["branches"] and "plain" not in str(graph)
    assert all(nodes[ids[n]]["lane"] == 0 and nodes[ids[n]]["step"] == n for n in range(7))


def test_a_fork_s_report_draws_the_run_it_came_from(runs, tmp_path):
    root, run_pf, _ = runs
    _, text = write_report(run_pf, root, "alt", tmp_path / "alt.html")
    _, data = parse(text)
    ids, alt = step_ids(root, "run"), step_ids(root, "alt")
    assert [s["commit"] for s in data["steps"]] == [alt[n] for n in range(4)] and data["end"] is None
    assert data["steps"][3]["forked"] and data["steps"][3]["exchange"]["text"] == "Changed my mind."
    nodes = {n["id"]: n for n in data["fork_graph"]["nodes"]}
    tip = git(root, "rev-parse", "refs/pf/heads/run").strip()
    assert nodes[tip]["branches"] == ["run"] and nodes[tip]["final"] and nodes[tip]["lane"] > 0
    assert nodes[ids[4]]["row"] == 4 and nodes[alt[3]]["lane"] == 0 and data["blame"] is None
    alt2 = step_ids(root, "alt2")
    assert nodes[alt2[3]]["row"] == 3 and nodes[alt2[3]]["branches"] == ["alt2"]


def _blob_tree(root, name: str, data: bytes) -> str:
    blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], cwd=root, input=data, capture_output=True,
                          check=True).stdout.decode().strip()
    return subprocess.run(["git", "mktree"], cwd=root, input=f"100644 blob {blob}\t{name}\n".encode(),
                          capture_output=True, check=True).stdout.decode().strip()


def _commit(root, tree: str, parent: str, message: str) -> str:
    return subprocess.run(["git", "commit-tree", tree, "-p", parent, "-m", message], cwd=root, capture_output=True,
                          text=True, check=True, env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e",
                                                      "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e",
                                                      "PATH": "/usr/bin:/bin"}).stdout.strip()


def write_blame(root, run: str, outcomes: dict[int, list[str]], name: str | None = None) -> None:
    """A finished blame run (``name``, default the branch's) of branch ``run`` as refs, laid out as
    the blame storage says."""
    tip = git(root, "rev-parse", f"refs/pf/heads/{run}").strip()
    ids = step_ids(root, run)
    run_name = name or run
    meta = {"v": 1, "run": run_name, "rev": tip, "k": 5, "steps": [min(outcomes), max(outcomes)], "perturb": "text",
            "grade": {"oracle": "true"}, "baseline": {"grade": "fail", "detail": "x"}, "null_rate": 0.1,
            "alpha": 0.05, "seed": 0}
    meta_tree = _blob_tree(root, "blame.json", json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    git(root, "update-ref", f"refs/pf/blame/{run_name}/meta", _commit(root, meta_tree, tip, "blame meta"))
    for step, found in outcomes.items():
        for k, outcome in enumerate(found, 1):
            image = git(root, "rev-parse", f"{ids[step]}^{{tree}}").strip()
            trial = _commit(root, image, ids[step - 1], f"step {step}: trial\n\nPf-Step: {step}")
            verdict = _commit(root, image, trial, f"blame verdict\n\nPf-Blame-Step: {step}\nPf-Blame-Trial: {k}\n"
                                                  f"Pf-Blame-Outcome: {outcome}\nPf-Blame-Reason: graded\n"
                                                  f"Pf-Blame-Cost-USD: 0.000000")
            git(root, "update-ref", f"refs/pf/blame/{run_name}/step-{step}/{k}", verdict)


def test_the_blame_chart_and_a_replay_divergence(runs, tmp_path):
    root, run_pf, tmp = runs
    _, text = write_report(run_pf, root, "run", tmp_path / "r.html", "--replay", tmp / "replay.json")
    page, data = parse(text)
    no_request(text, page)
    blame = data["blame"]  # found by the branch's name, no --blame needed
    assert blame["run"] == "run" and blame["decisive"] == 3
    rows = {r["step"]: r for r in blame["steps"]}
    assert rows[3]["rate"] == 1.0 and rows[3]["label"] == "decisive" and rows[2]["rate"] == 0.0
    assert 0 < rows[3]["wilson"][0] < 1 == rows[3]["wilson"][1] and rows[4]["undefined"] == 1 and rows[4]["flips"] == 1
    trials = [n for n in data["fork_graph"]["nodes"] if any(b.startswith("blame:run/step-") for b in n["branches"])]
    assert len(trials) == 15 and {n["outcome"] for n in trials} == {"flip", "no-flip", "undefined"}
    replay = data["replay"]
    assert replay["bit_exact"] is False and replay["mismatch"]["step"] == 1
    assert "step 1" in replay["mismatch"]["line"] and any(r["path"].startswith("$.messages") for r in replay["mismatch"]["diff"])
    _, again = write_report(run_pf, root, "run", tmp_path / "r2.html", "--blame", "run")
    assert parse(again)[1]["blame"] == blame and parse(again)[1]["replay"] is None


def test_stdout_and_the_default_file_name(runs):
    root, run_pf, _ = runs
    proc = run_pf("report", "run", "-o", "-", cwd=root)
    assert proc.stdout.startswith("<!DOCTYPE html>") and parse(proc.stdout)[1]["tip"] == \
        git(root, "rev-parse", "refs/pf/heads/run").strip()
    proc = run_pf("report", "run", cwd=root)
    assert "pf-report-run.html" in proc.stderr + proc.stdout and (root / "pf-report-run.html").is_file()
    step1 = step_ids(root, "run")[1]
    said = json.loads(run_pf("report", step1, "--json", cwd=root).stdout)
    assert said["path"].endswith(f"pf-report-run-{step1[:8]}.html") and said["steps"] == 1
    for name in ("pf-report-run.html", f"pf-report-run-{step1[:8]}.html"):
        (root / name).unlink()


def test_bad_input_is_one_line_and_writes_nothing(runs, tmp_path):
    root, run_pf, _ = runs
    (tmp_path / "not.json").write_text("{nope")
    (tmp_path / "other.json").write_text('{"branch": "run", "steps": 2}')
    before = sorted(p.name for p in root.iterdir())
    for args, words in ((("nope",), "nope"), (("plain",), "not a recorded run"),
                        (("run", "--replay", tmp_path / "not.json"), "not JSON"),
                        (("run", "--replay", tmp_path / "other.json"), "not a 'git pf replay --json' report"),
                        (("run", "--replay", tmp_path / "missing.json"), "missing.json"),
                        (("run", "--blame", "nosuch"), "no blame run 'nosuch'"),
                        (("run", "-o", tmp_path / "no" / "dir" / "r.html"), "not a directory"),
                        (("run", "-o", "-", "--json"), "--json")):
        proc = run_pf("report", *args, cwd=root, check=False)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr.count("\n") == 1 and words in proc.stderr and "Traceback" not in proc.stderr, args
        assert proc.stdout == ""
    assert sorted(p.name for p in root.iterdir()) == before and not (tmp_path / "no").exists()


def test_a_blame_run_of_another_revision_is_not_drawn(runs, tmp_path):
    """A blame run named after 'alt2' that blamed 'run' (not a commit of alt2's line) is not alt2's chart."""
    root, run_pf, tmp = runs
    tip = git(root, "rev-parse", "refs/pf/heads/run").strip()
    meta = {"v": 1, "run": "alt2", "rev": tip, "k": 5, "steps": [2, 4], "perturb": "text", "grade": {"oracle": "true"},
            "baseline": {"grade": "fail", "detail": "x"}, "null_rate": 0.1, "alpha": 0.05, "seed": 0}
    tree = _blob_tree(root, "blame.json", json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    git(root, "update-ref", "refs/pf/blame/alt2/meta", _commit(root, tree, tip, "blame meta"))
    try:
        assert parse(write_report(run_pf, root, "alt2", tmp_path / "a.html")[1])[1]["blame"] is None
        proc = run_pf("report", "alt2", "--blame", "alt2", "-o", tmp_path / "b.html", cwd=root, check=False)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "not a step of this run" in proc.stderr
        assert not (tmp_path / "b.html").exists()
        drawn = parse(write_report(run_pf, root, "run", tmp_path / "c.html", "--blame", "alt2")[1])[1]["blame"]
        assert drawn["run"] == "alt2" and [r["step"] for r in drawn["steps"]] == [2, 3, 4]  # it did blame 'run'
    finally:
        git(root, "update-ref", "-d", "refs/pf/blame/alt2/meta")
