"""The report of a 1,000-step run: file size and time to first render in headless Chromium.

    python -m benchmarks.bench_report [--steps 1000] [--runs 5]

The run is recorded against the fake LLM server by the lean client of the record benchmark
(benchmarks/record_client.py: one exchange per step, a file of the world written every 10th step),
so its steps are real step images. ``git pf report`` writes the page; Debian's Chromium (selenium,
headless, a fresh profile) opens it from a file:// URL ``--runs`` times. Time to first render is
navigation start to the first frame painted after the timeline holds its steps: a script injected
before the page's own (DevTools ``Page.addScriptToEvaluateOnNewDocument``) watches ``#timeline`` and
stamps ``performance.now()`` at the frame after its steps appear. Goal: <= 1 s. Also reported: the
time ``git pf report`` takes to write the page, and the page's ``DOMContentLoaded``.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from git_pf.testing.fakellm import FakeLLM

from .bench_record import CLIENT, PF, BenchError, new_repo, record, run
from .common import git_env, report, verdict, workdir

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--window-size=1280,900")
GOAL_S = 1.0

# Runs before the page's scripts: when #timeline first holds a .step, wait for the next frame to be
# painted (requestAnimationFrame, then a task after it) and stamp the time.
WATCH = """
(function () {
  window.__pfPainted = null;
  function check() {
    var t = document.getElementById("timeline");
    if (!t || !t.querySelector(".step")) return false;
    requestAnimationFrame(function () { setTimeout(function () {
      if (window.__pfPainted === null) window.__pfPainted = performance.now();
    }, 0); });
    return true;
  }
  new MutationObserver(function (m, obs) { if (check()) obs.disconnect(); })
    .observe(document, {childList: true, subtree: true});
})();
"""


def chrome():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.TemporaryDirectory(prefix="pf-bench-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in (*FLAGS, f"--user-data-dir={profile.name}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WATCH})
    return driver, profile


def first_render_s(driver, url: str) -> tuple[float, float, int]:
    """(first render, DOMContentLoaded, steps shown) of one fresh load of ``url``, in seconds."""
    driver.get("about:blank")
    driver.get(url)
    deadline = time.monotonic() + 60
    while (painted := driver.execute_script("return window.__pfPainted")) is None:
        if time.monotonic() > deadline:
            raise BenchError("the page never showed its timeline")
        time.sleep(0.02)
    loaded = driver.execute_script("return performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
    steps = driver.execute_script("return document.querySelectorAll('#timeline .step').length")
    return painted / 1000, loaded / 1000, steps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args(argv)
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not p.exists()]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium")
    if missing:
        print(f"skipped: no {', '.join(missing)} (make test installs Debian's chromium and chromium-driver)")
        return 0
    env = git_env()
    with workdir("report") as base, FakeLLM() as fake:
        repo, world = new_repo(base / "repo", env), base / "world"
        world.mkdir()
        rec_s, _ = record(repo, env, fake, "long", world, [sys.executable, CLIENT, args.steps, world])
        page = base / "long.html"
        write_s, _ = run([PF, "report", "long", "-o", page], repo, env)
        size = page.stat().st_size
        driver, profile = chrome()
        try:
            first_render_s(driver, page.as_uri())  # warm-up: the browser's own first start is not the page's
            times = [first_render_s(driver, page.as_uri()) for _ in range(args.runs)]
        finally:
            driver.quit()
            profile.cleanup()
    renders, loads, shown = [t[0] for t in times], [t[1] for t in times], times[0][2]
    median = statistics.median(renders)
    report(f"Report of a {args.steps}-step run (headless Chromium, {args.runs} loads after a warm-up)", [
        (f"record of the {args.steps}-step run", f"{rec_s:.2f} s", "set-up"),
        ("git pf report (writes the page)", f"{write_s:.2f} s", "whole command"),
        ("report file size", f"{size / 1024:,.0f} KiB", f"{size / args.steps:,.0f} bytes per step"),
        ("steps in the timeline", f"{shown}", "all" if shown >= args.steps else "MISSING STEPS"),
        ("DOMContentLoaded, median", f"{statistics.median(loads) * 1000:.0f} ms", f"{min(loads) * 1000:.0f}-{max(loads) * 1000:.0f} ms"),
        ("time to first render, median", f"{median * 1000:.0f} ms",
         f"goal <= {GOAL_S:.0f} s: {median / GOAL_S:.2f}x of it  {verdict(median <= GOAL_S)}"),
        ("time to first render, range", f"{min(renders) * 1000:.0f}-{max(renders) * 1000:.0f} ms", ""),
    ])
    return 0


if __name__ == "__main__":
    sys.exit(main())
