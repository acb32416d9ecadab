"""Helpers of the browser tests: Debian's headless Chromium driven by selenium, a ``git pf serve``
process, and a small PNG reader. Test helper only: starts real processes, downloads nothing."""
from __future__ import annotations

import contextlib
import os
import signal
import struct
import subprocess
import tempfile
import zlib
from pathlib import Path

import pytest

from conftest import BIN

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1280,900")
WAIT_S = 20  # the longest a test waits for the page to show something


def need_browser() -> None:
    """Skip the test, saying why, when Debian's chromium or chromium-driver is not installed."""
    missing = [str(p) for p in (CHROMIUM, CHROMEDRIVER) if not os.access(p, os.X_OK)]
    if missing:
        pytest.skip(f"no {' or '.join(missing)}: install Debian's chromium and chromium-driver (make test does)")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")


@contextlib.contextmanager
def browser():
    """A headless Chromium with a fresh profile; quit afterwards."""
    need_browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    with tempfile.TemporaryDirectory(prefix="pf-chromium-") as profile:
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in FLAGS:
            options.add_argument(flag)
        options.add_argument(f"--user-data-dir={profile}")
        driver = webdriver.Chrome(options=options, service=Service(executable_path=str(CHROMEDRIVER)))
        try:
            yield driver
        finally:
            driver.quit()


def wait_for(driver, condition, what: str, wait_s: float = WAIT_S):
    """The first truthy value of ``condition(driver)`` (up to ``wait_s``), else a failure naming ``what``."""
    from selenium.common.exceptions import TimeoutException
    from selenium.webdriver.support.ui import WebDriverWait

    try:
        return WebDriverWait(driver, wait_s, poll_frequency=0.1).until(condition)
    except TimeoutException:
        raise AssertionError(f"the page never showed {what}") from None


def css(driver, selector: str):
    from selenium.webdriver.common.by import By

    return driver.find_elements(By.CSS_SELECTOR, selector)


def click(driver, element) -> None:
    """Click ``element`` after scrolling it into view (an SVG node included)."""
    driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", element)
    try:
        element.click()
    except Exception:  # an SVG <g> can be covered by its own children: a DOM click does the same
        driver.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}));", element)


@contextlib.contextmanager
def serving(repo_dir: Path, *args: str, agent: list[str] = ()):
    """``git pf serve --port 0 ARGS [-- AGENT]`` in ``repo_dir``; yields (url, login, process): the
    server's base URL and the URL it printed (with its secret). Stopped with SIGINT (as Ctrl-C)
    afterwards; its exit code and stderr are then on the process object."""
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    cmd = ["git-pf", "serve", "--port", "0", *args] + (["--", *agent] if agent else [])
    proc = subprocess.Popen(cmd, cwd=repo_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        login = proc.stdout.readline().strip()
        assert login.startswith("http://127.0.0.1:"), f"serve printed {login!r}: {proc.stderr.read() if not login else ''}"
        yield login[:login.index("/", len("http://"))], login, proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr_text = proc.stderr.read()
        proc.stdout.close()
        proc.stderr.close()


def png_colours(data: bytes, limit: int = 4) -> set[tuple[int, ...]]:
    """The distinct pixel colours of an 8-bit RGB or RGBA PNG (stops counting at ``limit``)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos:pos + 4]), data[pos + 4:pos + 8]
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert depth == 8 and colour_type in (2, 6) and interlace == 0, f"unexpected PNG format {header}"
    bpp = 3 if colour_type == 2 else 4
    raw, stride, previous, seen = zlib.decompress(idat), width * bpp, bytearray(width * bpp), set()
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, corner = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - corner
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - corner)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else corner)) & 255
        seen.update(bytes(line[i:i + bpp]) for i in range(0, stride, bpp * 7))  # every 7th pixel is enough
        if len(seen) >= limit:
            break
        previous = line
    return {tuple(c) for c in seen}
