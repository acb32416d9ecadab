"""The report reads at a glance (docs/report.md): a long string that differs shows as a line diff, the
fork graph's labels sit clear of its nodes beside a legend of the outcome colours, blame runs show one
at a time, an insufficient step is marked, whiskers are whole, and the effects panel counts the tool
calls the tape shows, on the ledger or not.

Real components: a run recorded with the demo agent on the real openai SDK against the fake LLM
server, forks made by ``git pf fork``, blame runs as refs, the real CLI, and Debian's headless Chromium
(a screenshot of the page is kept in the test's directory)."""
from __future__ import annotations

import json

import pytest

from browser_helpers import browser, click, css, png_colours, wait_for
from git_pf.testing.fakellm import FakeLLM
from runs_helpers import record, step_ids
from test_report import _runner, parse, write_blame

# step 2 reads a file and step 4 writes one (tools the ledger never sees); step 3 calls notify, a git_pf.tool
SCRIPT = ["I will keep notes.", {"tool": "read_file", "args": {"path": "task.md"}},
          {"tool": "notify", "args": {"message": "hello"}},
          {"tool": "write_file", "args": {"path": "out.txt", "content": "done"}}, "All done."]
SYSTEM = "".join(f"Rule {i}: keep the notes short and the tools few.\n" for i in range(60))
RECORDED = SYSTEM + "Today's date is 2026-11-27.\n" + SYSTEM
LIVE = SYSTEM + "Today's date is 2026-11-28.\n" + SYSTEM


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    """The report of 'run' (two forks at step 3 with long names, two blame runs, a replay report whose
    mismatch is a long system prompt that differs in one date) and its parsed data."""
    from git_pf import Repo

    tmp = tmp_path_factory.mktemp("views")
    root = tmp / "repo"
    Repo.init(root)
    run_pf = _runner(tmp)
    with FakeLLM(SCRIPT) as fake:
        record(run_pf, root, fake, "openai.chat", tmp / "sb", effects=tmp / "fx")
    for name in ("alternative-reply-at-three", "another-alternative-at-three"):
        (tmp / f"{name}.txt").write_text(f"Changed my mind: {name}.")
        run_pf("fork", "run", "--at-step", "3", "--response", tmp / f"{name}.txt", "--name", name, cwd=root)
    write_blame(root, "run", {2: ["no-flip"] * 5, 3: ["flip"] * 5, 4: ["flip", "undefined", "undefined", "undefined"]})
    write_blame(root, "run", {1: ["no-flip"] * 3, 2: ["flip"] * 4}, name="second")
    replay = {"bit_exact": False, "rev": "run", "exit": 1, "exchanges": {"served": 0, "of": 5},
              "draws": {"consumed": 0, "of": 10}, "effects": {"replayed": 0, "of": 2}, "divergence": None,
              "mismatch": {"step": 1, "line": "step 1: the request differs from the recorded one at $.messages[0].content",
                           "diff": [{"path": "$.messages[0].content", "recorded": RECORDED, "live": LIVE}]}}
    (tmp / "replay.json").write_text(json.dumps(replay))
    out = tmp / "report.html"
    run_pf("report", "run", "-o", out, "--replay", tmp / "replay.json", cwd=root)
    return root, tmp, out, parse(out.read_text(encoding="utf-8"))[1]


def test_the_data_holds_tape_tool_calls_blame_runs_and_a_line_diff(page):
    root, _, _, data = page
    assert [(t["step"], t["tool"], t["ledger"] is not None) for t in data["tape_tools"]] == \
        [(2, "read_file", False), (3, "notify", True), (4, "write_file", False)]
    assert [e["tool"] for e in data["ledger"]] == ["notify", "notify"]
    assert [b["run"] for b in data["blame_runs"]] == ["run", "second"] and data["blame"] == data["blame_runs"][0]
    labels = {r["step"]: r["label"] for r in data["blame_runs"][0]["steps"]}
    assert labels[4] == "insufficient"
    trials = [n for n in data["fork_graph"]["nodes"] if n["blame"]]
    assert {n["blame"] for n in trials} == {"run", "second"}
    [row] = data["replay"]["mismatch"]["diff"]
    assert "characters cut" not in row["lines"] and "characters cut" in row["recorded"]  # the cut value is not shown
    assert "-Today's date is 2026-11-27." in row["lines"] and "+Today's date is 2026-11-28." in row["lines"]
    assert row["lines"].count("\n") < 12  # the change and its context, not two whole prompts


@pytest.fixture(scope="module")
def driver():
    with browser() as d:
        yield d


def _rects(driver, selector: str) -> list[dict]:
    return driver.execute_script("return Array.from(document.querySelectorAll(arguments[0])).map(function (e) {"
                                 " var r = e.getBoundingClientRect(); return {l: r.left, t: r.top, r: r.right, b: r.bottom,"
                                 " text: e.textContent}; });", selector)


def _overlap(a: dict, b: dict) -> bool:
    return a["l"] < b["r"] and b["l"] < a["r"] and a["t"] < b["b"] and b["t"] < a["b"]


def test_the_page_reads_at_a_glance(page, driver):
    root, tmp, out, data = page
    driver.get(out.as_uri())
    wait_for(driver, lambda d: css(d, "#fork-svg g.fork-node"), "the fork graph")
    # the legend names every colour
    legend = [e.get_attribute("textContent") for e in css(driver, "#fork-legend .legend-item")]
    assert legend == ["the run's line", "a fork", "run end", "blame trial: flip", "blame trial: no flip",
                      "blame trial: undefined"]
    # labels sit clear of every node, and of each other
    labels, circles = _rects(driver, "#fork-svg .fork-label"), _rects(driver, "#fork-svg circle")
    assert {l["text"] for l in labels} >= {"alternative-reply-at-three", "another-alternative-at-three"}
    assert not [(l["text"], c) for l in labels for c in circles if _overlap(l, c)]
    assert not [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:] if _overlap(a, b)]
    # one blame run at a time: the chart and the graph's trials follow the selector
    assert css(driver, "#blame-section")[0].get_attribute("data-run") == "run"
    assert {n.get_attribute("data-blame") for n in css(driver, "#fork-svg g.fork-node[data-blame]")} == {"run"}
    assert len(css(driver, "#fork-svg g.fork-node.outcome-flip")) == 6
    # the insufficient step is marked; whiskers lie whole inside the plot
    assert css(driver, '.blame-bar[data-step="4"] .blame-insufficient')[0].get_attribute("textContent") == "?"
    [plot] = _rects(driver, ".blame-plot")
    whiskers = _rects(driver, ".blame-ci")
    assert whiskers and all(w["t"] >= plot["t"] + 2 and w["b"] <= plot["b"] + 1 for w in whiskers), (plot, whiskers)
    # the mismatch is a line diff with the changed characters marked
    marks = [m.get_attribute("textContent") for m in css(driver, "#divergence pre.line-diff mark.change")]
    assert marks == ["7", "8"]
    # the effects panel counts the tape's tool calls and names those not on the ledger
    click(driver, css(driver, '#timeline .step[data-step="5"]')[0])
    said = wait_for(driver, lambda d: [e.get_attribute("textContent") for e in css(d, '#step-detail[data-step="5"] p.tape-tools')],
                    "the tape's tool calls")[0]
    assert said == "3 tool calls in the tape up to here, 2 not on the ledger: read_file (step 2), write_file (step 4)"
    assert "3 tool calls in the tape (2 not on the ledger)" in css(driver, "#summary-line")[0].get_attribute("textContent")
    driver.set_window_size(1280, 2400)
    driver.save_screenshot(str(tmp / "report.png"))
    assert len(png_colours(driver.get_screenshot_as_png())) > 4
    from selenium.webdriver.support.ui import Select

    Select(css(driver, "#blame-select")[0]).select_by_value("second")
    assert css(driver, "#blame-section")[0].get_attribute("data-run") == "second"
    assert {n.get_attribute("data-blame") for n in css(driver, "#fork-svg g.fork-node[data-blame]")} == {"second"}
    Select(css(driver, "#blame-select")[0]).select_by_value("-")
    assert css(driver, "#fork-svg g.fork-node[data-blame]") == []
