"""The real Claude Code CLI against a scripted Anthropic server, for the tests and the hook benchmark.

``ScriptedAnthropic`` is git-pf's offline fake server (``git_pf.testing.fakellm``: streamed
``POST /v1/messages?beta=true`` with tool_use blocks) that also answers the CLI's ``HEAD /``
preconnects and logs every request it does not know. Its script picks the reply of the main
conversation by the number of assistant turns already in the request, so a resumed session goes on
where its transcript ends; a request without tools (a side request) gets a short text.
``run_claude`` runs ``claude -p`` non-interactively with the telemetry, error reporting and updater
off and a config directory of the test's own. The CLI is the one ``make claude-code`` installs
(``.npm-tools/``); ``CLAUDE_BIN`` names another.
"""
from __future__ import annotations

import json
import os
import subprocess
import threading
from http.server import ThreadingHTTPServer
from pathlib import Path

from git_pf.testing import fakellm

ROOT = Path(__file__).resolve().parent.parent
CLAUDE = Path(os.environ.get("CLAUDE_BIN") or ROOT / ".npm-tools" / "node_modules" / ".bin" / "claude")


def missing() -> str | None:
    """Why the real CLI cannot run here (None: it can)."""
    if CLAUDE.exists() and os.access(CLAUDE, os.X_OK):
        return None
    return f"the Claude Code CLI is not installed at {CLAUDE} (run 'make claude-code'; it needs npm)"


def session(root: Path, final: str = "All done.") -> list:
    """Write hello.py, a Bash call that makes a file and fails, an Edit of hello.py, a final text."""
    hello = str(root / "hello.py")
    return [{"tool": "Write", "args": {"file_path": hello, "content": "print('hi')\n"}},
            {"tool": "Bash", "args": {"command": "echo made > made.txt; exit 3", "description": "make a file"}},
            {"tool": "Edit", "args": {"file_path": hello, "old_string": "hi", "new_string": "bye"}},
            final]


class _Handler(fakellm._Handler):
    def do_HEAD(self) -> None:  # the CLI's preconnect
        self.fake.others.append(("HEAD", self.path))
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def do_GET(self) -> None:
        self.fake.others.append(("GET", self.path))
        super().do_GET()


class ScriptedAnthropic(fakellm.FakeLLM):
    """``items``: the main conversation's replies, one per assistant turn (past the end: "done")."""

    def __init__(self, items: list, **kw):
        self.items = list(items)
        self.others: list[tuple[str, str]] = []
        super().__init__(self._pick, **kw)

    def _pick(self, api: str, request: dict, n: int):
        if not request.get("tools"):
            return "ok"
        turns = sum(1 for m in request.get("messages") or () if isinstance(m, dict) and m.get("role") == "assistant")
        return self.items[turns] if turns < len(self.items) else "done"

    def start(self) -> "ScriptedAnthropic":
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        daemon=True, name="scripted-anthropic")
        self._thread.start()
        return self

    def unknown(self) -> list:
        """Requests that were not a Messages call nor a preconnect (for a test's failure message)."""
        return [(m, p) for m, p in self.others if m != "HEAD"] + [
            (r["method"], r["path"]) for r in self.requests if r["api"] == "other"]


def claude_env(base: dict, url: str, config_dir: Path) -> dict:
    return dict(base, IS_SANDBOX="1", DISABLE_TELEMETRY="1", DISABLE_ERROR_REPORTING="1", DISABLE_AUTOUPDATER="1",
                CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", ANTHROPIC_BASE_URL=url, ANTHROPIC_API_KEY="test",
                CLAUDE_CONFIG_DIR=str(config_dir))


def run_claude(cwd: Path, env: dict, prompt: str, *extra: str, timeout: float = 120) -> dict:
    """``claude -p PROMPT`` with every permission granted; its JSON result (the session id in it)."""
    proc = subprocess.run([str(CLAUDE), "-p", prompt, "--dangerously-skip-permissions", "--output-format", "json",
                           *extra], cwd=cwd, env=env, capture_output=True, timeout=timeout)
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    return json.loads(proc.stdout)


def transcript_of(config_dir: Path, session_id: str) -> Path:
    found = list(Path(config_dir, "projects").glob(f"*/{session_id}.jsonl"))
    assert len(found) == 1, found
    return found[0]
