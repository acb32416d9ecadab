"""tracefork for the record benchmark: installed from the registry into a venv of its own under the
benchmark's scratch directory (it needs Python >= 3.12 and anthropic 1.x, git-pf's venv has 3.11 and
anthropic 2.x), then its localhost record / replay proxy (``tracefork proxy record|replay``) in front of
the same agent and the same fake server that ``git pf record`` / ``replay`` get (recording runs
tracefork's proxy app through record_tracefork_proxy.py, which says why).

Benchmark helper only: it writes under the scratch directory it is given and talks to 127.0.0.1.
"""
from __future__ import annotations

import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

DRIVER = Path(__file__).with_name("record_tracefork_proxy.py")


def _python312() -> str | None:
    found = [shutil.which(n) for n in ("python3.14", "python3.13", "python3.12")]
    found += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[2-9]*/bin/python3")), reverse=True)
    for exe in filter(None, found):
        ok = subprocess.run([exe, "-c", "import sys; sys.exit(sys.version_info < (3, 12))"], capture_output=True)
        if ok.returncode == 0:
            return exe
    return None


def install(scratch: Path) -> tuple[Path | None, str]:
    """(the ``tracefork`` executable, its version) or (None, why it could not be installed)."""
    exe = _python312()
    if exe is None:
        return None, "tracefork needs Python >= 3.12 and none was found (python3.12, python3.13, pyenv)"
    venv = scratch / "tracefork-venv"
    steps = [[exe, "-m", "venv", str(venv)], [str(venv / "bin" / "pip"), "install", "-q", "tracefork"]]
    for cmd in steps:
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired:
            return None, f"{' '.join(cmd[:3])} took over 10 minutes"
        if proc.returncode != 0:
            lines = [l for l in proc.stderr.splitlines() if l.strip() and "is ignored" not in l]
            return None, f"pip install tracefork failed: {(lines or ['no message'])[-1]}"
    version = subprocess.run([str(venv / "bin" / "python"), "-c", "import importlib.metadata as m; "
                              "print(m.version('tracefork'))"], capture_output=True, text=True).stdout.strip()
    return venv / "bin" / "tracefork", version


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, proc: subprocess.Popen, limit: float = 30.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if proc.poll() is not None:
            raise RuntimeError(f"tracefork proxy exited {proc.returncode}: {proc.stderr.read()[-300:]!r}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise RuntimeError("tracefork proxy did not listen within 30 s")


def proxied_run(tracefork: Path, mode: str, tape: Path, agent: list[str], env: dict,
                upstream: str | None = None) -> tuple[float, subprocess.CompletedProcess]:
    """Start ``tracefork proxy MODE``, run the agent through it, stop it (SIGINT: it saves the tape);
    the wall time of the whole and the agent's result."""
    port = _free_port()
    if mode == "record":  # tracefork's app under uvicorn, as its command runs it (see record_tracefork_proxy.py)
        cmd = [str(tracefork.with_name("python")), str(DRIVER), str(tape), str(port), upstream]
    else:
        cmd = [str(tracefork), "proxy", mode, "--tape", str(tape), "--port", str(port)]
    t0 = time.perf_counter()
    proxy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        _wait_port(port, proxy)
        base = f"http://127.0.0.1:{port}"
        agent_env = dict(env, OPENAI_BASE_URL=base + "/v1", ANTHROPIC_BASE_URL=base)
        done = subprocess.run(agent, env=agent_env, capture_output=True, text=True, timeout=300)
    finally:
        proxy.send_signal(signal.SIGINT)
        try:
            proxy.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proxy.kill()
            proxy.wait()
    return time.perf_counter() - t0, done


def outcome(stdout: str, files: bool = False) -> dict | None:
    """The agent's summary line: the conversation digest, the tools run, the last reply, and with
    ``files`` the hashes of the sandbox files (log.txt holds the draws, which a proxy alone cannot
    replay)."""
    lines = [l for l in stdout.splitlines() if l.startswith("agent: ")]
    if not lines:
        return None
    summary = json.loads(lines[-1].removeprefix("agent: "))
    if not files:
        summary.pop("files", None)
    return summary


def lines_of(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def compare(scratch: Path, agent: list[str], env: dict, upstream: str, effects: Path) -> dict:
    """Record and replay the agent through tracefork's proxy: times, tape size, whether the replayed
    agent ended as the recorded one did (conversation; sandbox files too), how many times the
    irreversible tool's body ran again. Raises RuntimeError with a reason when it cannot."""
    tracefork, version = install(scratch)
    if tracefork is None:
        raise RuntimeError(version)
    tape = scratch / "tf.tape.sqlite"
    sandbox = scratch / "tf-sandbox"
    run_agent = agent + ["--sandbox", str(sandbox)]
    rec_s, rec = proxied_run(tracefork, "record", tape, run_agent, env, upstream)
    if rec.returncode != 0 or not tape.exists():
        raise RuntimeError(f"recording through tracefork failed: {(rec.stderr.strip() or 'no tape saved')[-200:]}")
    shutil.rmtree(sandbox)
    before = lines_of(effects)
    rep_s, rep = proxied_run(tracefork, "replay", tape, run_agent, env)
    same = rep.returncode == 0 and outcome(rep.stdout) == outcome(rec.stdout)
    return {"version": version, "record_s": rec_s, "replay_s": rep_s, "tape_bytes": tape.stat().st_size,
            "replay_same": same, "files_same": same and outcome(rep.stdout, True) == outcome(rec.stdout, True),
            "effects_rerun": lines_of(effects) - before,
            "replay_error": "" if same else (rep.stderr.strip()[-200:] or "outputs differ")}


if __name__ == "__main__":  # a quick look: python -m benchmarks.record_tracefork SCRATCH
    print(install(Path(sys.argv[1])))
