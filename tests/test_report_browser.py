"""The report and ``git pf serve`` in a real browser (Debian's headless Chromium through selenium)
and over plain HTTP. Real components: runs recorded against the fake LLM server, the real CLI,
the real server on 127.0.0.1. The browser tests skip, saying why, when chromium is absent."""
from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
from urllib.parse import urlsplit

import pytest

from browser_helpers import browser, click, css, png_colours, serving, wait_for
from conftest import BIN, git_fsck_clean
from git_pf.runs.llm import wire
from git_pf.testing.fakellm import FakeLLM
from runs_helpers import SCRIPT, agent_cmd, git, record, step_ids, tape

HOSTILE = ["</script><script>window.__pwned=1</script>", '<img src=x onerror="window.__pwned=1">']


@pytest.fixture(scope="module")
def driver():
    with browser() as d:
        yield d


def _record(run_pf, root, tmp_path, script, fork: bool) -> None:
    with FakeLLM(script) as fake:
        record(run_pf, root, fake, "openai.chat", tmp_path / "sb", effects=tmp_path / "fx")
    if fork:
        (tmp_path / "reply.txt").write_text("Changed my mind: writing plan.txt.")
        run_pf("fork", "run", "--at-step", "3", "--response", tmp_path / "reply.txt", "--name", "alt", cwd=root)


@pytest.fixture(scope="module")
def recorded_once(tmp_path_factory):
    """A repository holding a 5-step run on branch 'run' (its notify effect logged outside the
    sandbox) and branch 'alt' forked from it at step 3; recorded once, copied by each test."""
    from git_pf import Repo

    base = tmp_path_factory.mktemp("recorded")
    Repo.init(base / "repo")
    _record(_cli, base / "repo", base, SCRIPT, fork=True)
    return base / "repo"


def _cli(*args, cwd=None, check=True, env=None):
    proc = subprocess.run(["git-pf", *map(str, args)], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", **(env or {})))
    assert proc.returncode == 0 or not check, proc.stderr
    return proc


@pytest.fixture
def recorded(recorded_once, tmp_path):
    """This test's copy of ``recorded_once`` (``git fsck`` must be clean afterwards)."""
    root = tmp_path / "repo"
    shutil.copytree(recorded_once, root, symlinks=True)
    yield root
    git_fsck_clean(root)


def _branches(root) -> list[str]:
    return git(root, "for-each-ref", "--format=%(refname:lstrip=3)", "refs/pf/heads/").split()


def _open_step(driver, n: int):
    click(driver, css(driver, f'#timeline .step[data-step="{n}"]')[0])
    return wait_for(driver, lambda d: (css(d, f'#step-detail[data-step="{n}"]') or [None])[0], f"step {n}'s detail")


def _texts(driver, selector: str) -> list[str]:
    return [e.get_attribute("textContent") for e in css(driver, selector)]


def test_report_file_shows_steps_exchanges_world_effects_and_forks(driver, recorded, run_pf, tmp_path):
    root = recorded
    page = tmp_path / "report.html"
    run_pf("report", "run", "-o", page, cwd=root)
    driver.get(page.as_uri())
    shown = wait_for(driver, lambda d: css(d, "#timeline .step"), "the timeline")
    steps = sorted(int(s.get_attribute("data-step")) for s in shown)
    assert set(steps) - {0} == {1, 2, 3, 4, 5} and len(steps) == len(set(steps))
    assert css(driver, "#pf-report")[0].get_attribute("data-rev")

    detail = _open_step(driver, 3)
    assert "selected" in css(driver, '#timeline .step[data-step="3"]')[0].get_attribute("class").split()
    assert "Read it; writing notes." in " ".join(_texts(driver, "#step-detail .exchange-text"))
    assert "Keep notes of every step" in detail.find_element("css selector", ".exchange-request").get_attribute("textContent")
    _open_step(driver, 4)  # a step's world is the sandbox as its request found it: step 3's note shows at 4
    assert any("notes/step-03.txt" in f for f in _texts(driver, "#step-detail .world-diff .world-file"))
    assert any("Read it; writing notes." in p for p in _texts(driver, "#step-detail .world-diff pre.patch"))

    effects = []
    for n in (1, 2, 3, 4, 5):
        _open_step(driver, n)
        effects += _texts(driver, "#step-detail .effects .effect")
    assert any("notify" in e and "halfway" in e for e in effects), effects

    alt_tip = git(root, "rev-parse", "refs/pf/heads/alt").strip()
    node = wait_for(driver, lambda d: css(d, '#fork-graph svg g.fork-node[data-branch="alt"]'), "the fork node of 'alt'")[0]
    assert node.get_attribute("data-commit") == alt_tip and css(driver, "#fork-graph path.fork-edge")
    click(driver, node)
    fork = wait_for(driver, lambda d: [e for e in css(d, "#fork-detail") if alt_tip[:7] in e.get_attribute("textContent")],
                    "the fork node's detail")[0].get_attribute("textContent")
    assert "alt" in fork and "3" in fork

    colours = png_colours(driver.get_screenshot_as_png())
    assert len(colours) > 1, "the screenshot is one flat colour"


def test_a_hostile_tape_executes_nothing_and_shows_as_text(driver, repo, run_pf, tmp_path):
    script = [HOSTILE[0], {"tool": "read_file", "args": {"path": "task.md"}}, HOSTILE[1], "fine", "done"]
    root = repo.git_dir.parent
    _record(run_pf, root, tmp_path, script, fork=False)
    page = tmp_path / "report.html"
    run_pf("report", "run", "-o", page, cwd=root)
    driver.get(page.as_uri())
    wait_for(driver, lambda d: css(d, "#timeline .step"), "the timeline")
    for n, text in ((1, HOSTILE[0]), (3, HOSTILE[1])):
        _open_step(driver, n)
        assert text in " ".join(_texts(driver, "#step-detail .exchange-text")), n
        _open_step(driver, n + 1)  # the note the agent wrote of it, in the next step's world
        assert any(text in p for p in _texts(driver, "#step-detail pre.patch")), n
    assert driver.execute_script("return typeof window.__pwned") == "undefined"
    assert css(driver, 'img[src="x"]') == []


def _request(url: str, method: str, path: str, *, host: str | None = None, headers: dict | None = None,
             body: bytes | None = None):
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True)
        conn.putheader("Host", host or parts.netloc)
        for key, value in (headers or {}).items():
            conn.putheader(key, value)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read().decode("utf-8", "replace")
    finally:
        conn.close()


def _login(url: str, login: str, path: str = "/") -> dict:
    """Trade the printed URL's secret for the session cookie, as a browser does on its first visit;
    the headers that carry it. The cookie is HttpOnly and SameSite=Strict; the redirect drops the secret."""
    query = urlsplit(login).query
    status, headers, body = _request(url, "GET", f"{path}?{query}")
    assert status == 303 and headers["location"] == path and body == "", (status, headers, body)
    cookie, *flags = [part.strip() for part in headers["set-cookie"].split(";")]
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(flags) and query not in headers["set-cookie"], flags
    return {"Cookie": cookie}


def test_serve_answers_only_its_own_host_and_the_holder_of_its_secret(recorded):
    """Another local process can reach the port but not the printed URL: without the secret or the
    cookie it reads nothing, forks nothing and runs nothing (403); the pages hold no credential."""
    root = recorded
    agent = [sys.executable, "-c", "import sys; sys.exit(0)"]
    with serving(root, agent=agent) as (url, login, proc):
        port = urlsplit(url).port
        fork = json.dumps({"branch": "run", "step": 3, "reply": "x"}).encode()
        as_json = {"Content-Type": "application/json"}
        for method, path, body in (("GET", "/", None), ("GET", "/report/run", None), ("HEAD", "/report/run", None),
                                   ("GET", "/api/runs/1", None), ("GET", "/?token=wrong", None),
                                   ("GET", "/report/run?token=", None), ("POST", "/api/fork", fork),
                                   ("POST", "/api/run", b'{"branch": "run"}'),
                                   ("POST", "/api/fork?" + urlsplit(login).query, fork)):
            status, _, answer = _request(url, method, path, headers=as_json if body else None, body=body)
            assert status == 403 and "pf-report" not in answer and "branch-link" not in answer, (method, path)
        wrong = {"Cookie": f"pf-serve-{port}=nope"}
        assert _request(url, "GET", "/report/run", headers=wrong)[0] == 403
        assert _request(url, "POST", "/api/run", headers=dict(as_json, **wrong), body=b'{"branch": "run"}')[0] == 403
        assert _branches(root) == ["alt", "run"]

        assert _login(url, login, "/report/run")["Cookie"].startswith(f"pf-serve-{port}=")
        session = _login(url, login)
        status, headers, index = _request(url, "GET", "/", headers=session)
        assert status == 200 and 'class="branch-link"' in index and ">run</a>" in index
        assert _request(url, "GET", "/", host=f"localhost:{port}", headers=session)[0] == 200
        for foreign in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", f"127.0.0.2:{port}"):
            status, _, body = _request(url, "GET", "/report/run", host=foreign, headers=session)
            assert status == 421 and "branch-link" not in body and "pf-report" not in body, foreign
            assert _request(url, "GET", "/" + "?" + urlsplit(login).query, host=foreign)[0] == 421
        status, _, page = _request(url, "GET", "/report/run", headers=session)
        assert status == 200 and 'id="pf-report"' in page
        secret, value = urlsplit(login).query.split("=", 1)[1], session["Cookie"].split("=", 1)[1]
        assert secret not in page + index and value not in page + index
        controls = re.search(r'<script type="application/json" id="pf-serve">(.*?)</script>', page, re.S).group(1)
        assert sorted(json.loads(controls)) == ["agent", "branch"]
        assert _request(url, "GET", "/api/runs/1", headers=session)[0] == 404  # the refused run never started
        status, preflight, _ = _request(url, "OPTIONS", "/api/fork", headers={
            "Origin": "http://evil.example", "Access-Control-Request-Method": "POST"})
        assert status >= 400
        for answer in (headers, preflight):
            assert not [k for k in answer if k.startswith("access-control-")]

        with_cookie = dict(as_json, **session)
        plain = dict(session, **{"Content-Type": "text/plain"})
        # a cross-site form post: its browser names the foreign origin (and SameSite=Strict keeps the cookie home)
        assert _request(url, "POST", "/api/fork", headers=dict(plain, Origin="http://evil.example"), body=fork)[0] == 403
        assert _request(url, "POST", "/api/fork", headers=dict(with_cookie, Origin="null"), body=fork)[0] == 403
        assert _request(url, "POST", "/api/fork", headers=plain, body=fork)[0] == 415
        assert _request(url, "POST", "/api/fork", host="evil.example", headers=with_cookie, body=fork)[0] == 421
        for bad in ({"branch": "run", "step": 9, "reply": "x"}, {"branch": "nope", "step": 3, "reply": "x"},
                    {"branch": "run", "step": "3", "reply": "x"}, ["run"]):
            status, _, body = _request(url, "POST", "/api/fork", headers=with_cookie, body=json.dumps(bad).encode())
            assert status == 400 and json.loads(body)["error"], bad
        assert _branches(root) == ["alt", "run"]
        status, _, made = _request(url, "POST", "/api/fork", headers=dict(with_cookie, Origin=url), body=fork)
        assert status == 200 and _branches(root) == sorted(["alt", "run", json.loads(made)["name"]])
    assert proc.returncode == 0 and proc.stderr_text == ""


def test_serve_is_quiet_when_a_client_resets_and_refuses_control_characters_in_a_path(recorded):
    root = recorded
    with serving(root) as (url, login, proc):
        port = urlsplit(url).port
        session = _login(url, login)
        request = f"GET /report/run HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nCookie: {session['Cookie']}\r\n\r\n"
        for sent in (request, request[:20], f"GET /?{urlsplit(login).query} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n"):
            for _ in range(3):  # reset while the server reads the request or writes its answer
                with socket.create_connection(("127.0.0.1", port)) as conn:
                    conn.sendall(sent.encode())
                    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        for path in ("/report/run%00", "/report/ru%0An", "/report/run%7F", "/report/run%C2%85", "/%00"):
            for headers in (session, None):
                status, _, body = _request(url, "GET", path, headers=headers)
                assert status == 400 and "control character" in json.loads(body)["error"], (path, headers)
        assert _request(url, "GET", "/report/run", headers=session)[0] == 200
    assert proc.returncode == 0 and proc.stderr_text == "", proc.stderr_text


def test_serve_pages_fork_only_when_confirmed(driver, recorded):
    root = recorded
    with serving(root) as (url, login, _):
        driver.get(url + "/")  # no credential yet: refused
        assert "no credential" in driver.find_element("css selector", "body").text and not css(driver, "a.branch-link")
        driver.get(login)  # the printed URL: its secret buys the cookie, and the page drops it
        links = wait_for(driver, lambda d: css(d, "a.branch-link"), "the branch links")
        assert driver.current_url == url + "/" and driver.execute_script("return document.cookie") == ""
        cookie = driver.get_cookie(f"pf-serve-{urlsplit(url).port}")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        assert sorted(a.text for a in links) == ["alt", "run"]
        click(driver, [a for a in links if a.text == "run"][0])
        wait_for(driver, lambda d: css(d, "#timeline .step"), "the report of 'run'")
        assert css(driver, "button.run-button")[0].get_attribute("disabled") is not None  # no agent given to serve

        _open_step(driver, 3)
        button = wait_for(driver, lambda d: css(d, "#step-detail button.fork-button"), "the fork button")[0]
        reply = css(driver, "#step-detail textarea.fork-reply")[0]
        reply.clear()
        reply.send_keys("A different reply.")
        driver.execute_script("window.__asked = []; window.confirm = function (m) { window.__asked.push(m); return false; };")
        click(driver, button)
        wait_for(driver, lambda d: css(d, '#serve-status[data-state="cancelled"]'), "the fork cancelled")
        assert _branches(root) == ["alt", "run"]

        driver.execute_script("window.confirm = function (m) { window.__asked.push(m); return true; };")
        click(driver, button)
        wait_for(driver, lambda d: css(d, '#serve-status[data-state="forked"]'), "the fork made")
        assert len(driver.execute_script("return window.__asked")) == 2
        made = [b for b in _branches(root) if b not in ("alt", "run")]
        assert len(made) == 1 and made[0].startswith("run-step3-")
    entries = [e for e in tape(root, f"refs/pf/heads/{made[0]}") if e.get("kind") == "exchange" and e.get("step") == 3]
    assert wire.reply_text(entries[0]) == "A different reply."
    assert step_ids(root, made[0])[2] == step_ids(root, "run")[2]


def test_serve_run_button_runs_a_fork_on_with_the_agent(driver, recorded, tmp_path):
    root = recorded
    agent = agent_cmd("openai.chat", tmp_path / "w", effects=tmp_path / "fx")
    with FakeLLM(["live four", "live five"]) as live, serving(root, "--upstream", live.url, agent=agent) as (url, login, _):
        driver.get(login.replace("/?", "/report/alt?"))
        assert driver.current_url == url + "/report/alt"
        run = wait_for(driver, lambda d: css(d, "button.run-button"), "the run button")[0]
        assert run.get_attribute("disabled") is None
        driver.execute_script("window.confirm = function () { return false; };")
        click(driver, run)
        wait_for(driver, lambda d: css(d, '#serve-status[data-state="cancelled"]'), "the run cancelled")
        assert live.requests == [] and sorted(step_ids(root, "alt")) == [0, 1, 2, 3]

        driver.execute_script("window.confirm = function () { return true; };")
        click(driver, run)
        state = wait_for(driver, lambda d: css(d, '#serve-status[data-state="done"], #serve-status[data-state="failed"]'),
                         "the run's end", wait_s=180)[0]  # an agent run on a busy machine
        assert state.get_attribute("data-state") == "done", state.text
        assert "live five" in css(driver, "#run-output")[0].text  # the agent's own summary line
        assert len(live.requests) == 2
    assert sorted(step_ids(root, "alt")) == [0, 1, 2, 3, 4, 5]


def test_serve_port_in_use_is_one_line_and_signals_stop_it_cleanly(repo, run_pf, tmp_path):
    root = repo.git_dir.parent
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = run_pf("serve", "--port", taken.getsockname()[1], cwd=root, check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "in use" in proc.stderr and proc.stdout == ""
    for sig in (signal.SIGINT, signal.SIGTERM):
        with serving(root) as (url, login, served):
            assert _request(url, "GET", "/", headers=_login(url, login))[0] == 200
            served.send_signal(sig)
            served.wait(30)
        assert served.returncode == 0 and "Traceback" not in served.stderr_text, served.stderr_text
        with pytest.raises(OSError):
            socket.create_connection((urlsplit(url).hostname, urlsplit(url).port), timeout=2).close()



def _one_line_error(answer, status: int, words: str) -> None:
    got, headers, body = answer
    error = json.loads(body)["error"]
    assert got == status and headers["content-type"] == "application/json", (got, body)
    assert words in error and "\n" not in error and "Traceback" not in error, error


def test_serve_answers_a_missing_run_404_and_damaged_data_500_in_one_line(recorded, tmp_path):
    root = recorded
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "a.txt").write_text("a")
    _cli("snapshot", "--fs-root", tmp_path / "plain", "--name", "plain", cwd=root)
    git_dir = root / ".git"
    assert git_dir.is_dir()
    with serving(root) as (url, login, proc):
        session = _login(url, login)
        _one_line_error(_request(url, "GET", "/report/nope", headers=session), 404, "no branch 'nope'")
        _one_line_error(_request(url, "GET", "/report/plain", headers=session), 404, "not a recorded run")
        tip = git(root, "rev-parse", "refs/pf/heads/run").strip()
        git(root, "update-ref", "refs/pf/blame/run/meta", tip)  # a meta commit with no blame.json in it
        _one_line_error(_request(url, "GET", "/report/run", headers=session), 500, "blame run 'run'")
        git(root, "update-ref", "-d", "refs/pf/blame/run/meta")
        assert _request(url, "GET", "/report/run", headers=session)[0] == 200
        git_dir.rename(root / "moved")  # the repository is gone from under the server
        try:
            _one_line_error(_request(url, "GET", "/", headers=session), 500, str(root))
            _one_line_error(_request(url, "GET", "/report/run", headers=session), 500, str(root))
        finally:
            (root / "moved").rename(git_dir)
        assert _request(url, "GET", "/", headers=session)[0] == 200
    assert proc.returncode == 0 and "Traceback" not in proc.stderr_text, proc.stderr_text


def test_stopping_serve_while_its_run_goes_stops_the_run_and_leaves_no_logs(recorded, tmp_path, monkeypatch):
    root = recorded
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    agent = [sys.executable, "-c", "import time; time.sleep(60)"]  # still running when the server stops
    with FakeLLM([]) as live, serving(root, "--upstream", live.url, agent=agent) as (url, login, served):
        assert [p.name.startswith("pf-serve-") for p in (tmp_path / "tmp").iterdir()] == [True]
        headers = {"Content-Type": "application/json", **_login(url, login)}
        status, _, body = _request(url, "POST", "/api/run", headers=headers, body=b'{"branch": "alt"}')
        assert status == 200 and json.loads(body)["state"] == "running", body
        served.send_signal(signal.SIGTERM)
        served.wait(60)
    assert served.returncode == 0 and "Traceback" not in served.stderr_text, served.stderr_text
    assert not [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("pf-serve-")]
