"""Draws: a real Python child records its clock, uuids, random and urandom through the hook,
and a fresh process replays them byte for byte (docs/record.md, "Draws")."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from git_pf.core.errors import DataError, UsageError
from git_pf.runs.channel import ChannelReader, draws, write_replay_file
from git_pf.runs.inject import HOOK_DIR, child_env

DRAWING = """
import datetime, os, random, secrets, time, uuid
print(time.time(), time.time_ns())
print(datetime.datetime.now(), datetime.datetime.utcnow(), datetime.datetime.today())
print(datetime.datetime.now(datetime.timezone.utc).isoformat(), datetime.date.today())
print(uuid.uuid1(), uuid.uuid4())
print(random.random(), random.randint(1, 10**9), random.choice("abcdefgh"), random.gauss(0, 1))
deck = list(range(20)); random.shuffle(deck); print(deck, random.Random().random())
print(os.urandom(12).hex(), secrets.token_hex(8), random.SystemRandom().random())
print(isinstance(datetime.datetime(2020, 1, 1), datetime.datetime))
"""


def _base() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("GIT_PF_") and k != "PYTHONPATH"}


def spawn(tmp_path: Path, code: str, mode: str | None, *, channel="channel", replay: Path | None = None,
          inject=True, base=None) -> subprocess.CompletedProcess:
    script = tmp_path / "child.py"
    script.write_text(textwrap.dedent(code))
    env = base if base is not None else _base()
    if mode is not None:
        env = child_env(env, mode=mode, channel=tmp_path / channel, replay_file=replay, inject=inject)
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)


def events(tmp_path: Path, channel="channel") -> list[dict]:
    reader = ChannelReader(tmp_path / channel)
    out = reader.new_events()
    assert reader.bad == 0
    return out


def record(tmp_path: Path, code: str) -> tuple[subprocess.CompletedProcess, list[dict]]:
    proc = spawn(tmp_path, code, "record", channel="recorded")
    assert proc.returncode == 0, proc.stderr
    return proc, draws(events(tmp_path, "recorded"))


def replay_file(tmp_path: Path, recorded: list[dict], mode="replay") -> Path:
    path = tmp_path / f"replay-{mode}.json"
    write_replay_file(path, draws=recorded, effects=[], allow_effects=False, mode=mode)
    return path


def test_a_fresh_process_replays_every_draw_byte_for_byte(tmp_path):
    first, recorded = record(tmp_path, DRAWING)
    assert {"time.time", "time.time_ns", "datetime.now", "datetime.utcnow", "datetime.today", "uuid.uuid1",
            "uuid.uuid4", "os.urandom", "random.seed"} <= {d["fn"] for d in recorded}
    assert first.stdout.strip().endswith("True")  # a datetime made by C code is still a datetime.datetime
    again = spawn(tmp_path, DRAWING, "record", channel="again")
    assert again.stdout != first.stdout  # recording is live: the values change from run to run

    replayed = spawn(tmp_path, DRAWING, "replay", replay=replay_file(tmp_path, recorded))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == first.stdout
    got = events(tmp_path)
    assert [e["t"] for e in got] == ["consumed"]
    assert got[0]["draws"] == got[0]["of"] == len(recorded)


def test_a_draw_of_another_function_diverges(tmp_path):
    _, recorded = record(tmp_path, "import time, uuid\nprint(time.time(), uuid.uuid4())\n")
    proc = spawn(tmp_path, "import time, uuid\nprint(uuid.uuid4(), time.time())\n", "replay",
                 replay=replay_file(tmp_path, recorded))
    assert proc.returncode == 86
    assert proc.stdout == ""
    assert proc.stderr.strip().splitlines() == [
        "git-pf: replay diverged: draw 3: the child called uuid.uuid4 where the recording has time.time"]
    (diverged,) = events(tmp_path)
    assert diverged["t"] == "diverged" and diverged["what"] == "draw" and diverged["index"] == 2
    assert diverged["expected"]["fn"] == "time.time" and diverged["got"] == {"fn": "uuid.uuid4"}


def test_a_draw_past_the_recording_diverges(tmp_path):
    code = "import time\nprint(time.time(), flush=True)\nprint(time.time())\n"
    first, recorded = record(tmp_path, code)
    assert [d["fn"] for d in recorded] == ["git_pf.seed", "random.seed", "time.time", "time.time"]
    proc = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, recorded[:3]))
    assert proc.returncode == 86
    assert proc.stdout == first.stdout.splitlines(keepends=True)[0]
    assert "past the 3 recorded draws" in proc.stderr
    assert [(e["t"], e["index"]) for e in events(tmp_path)] == [("diverged", 3)]


def test_run_mode_serves_the_recorded_draws_then_goes_live(tmp_path):
    code = "import time\nfor _ in range(3): print(time.time())\n"
    first, recorded = record(tmp_path, code)
    proc = spawn(tmp_path, code, "run", replay=replay_file(tmp_path, recorded[:3], mode="run"))
    assert proc.returncode == 0, proc.stderr
    lines, recorded_lines = proc.stdout.splitlines(), first.stdout.splitlines()
    assert lines[0] == recorded_lines[0] and lines[1:] != recorded_lines[1:]
    got = events(tmp_path)
    assert [e["fn"] for e in got if e["t"] == "draw"] == ["time.time", "time.time"]
    assert [str(e["v"]) for e in got if e["t"] == "draw"] == lines[1:]
    assert got[-1]["t"] == "consumed" and got[-1]["draws"] == 3 and got[-1]["recorded"] == 2


def test_run_mode_goes_live_at_the_first_mismatch(tmp_path):
    _, recorded = record(tmp_path, "import time\nprint(time.time())\n")
    proc = spawn(tmp_path, "import uuid\nprint(uuid.uuid4())\n", "run", replay=replay_file(tmp_path, recorded, "run"))
    assert proc.returncode == 0, proc.stderr
    assert [e["fn"] for e in events(tmp_path) if e["t"] == "draw"] == ["git_pf.seed", "uuid.uuid4"]


STREAM = "import os, random, uuid\nfor _ in range(3): print(uuid.uuid4(), os.urandom(5).hex(), random.Random().random())\n"


def test_random_draws_record_their_size_and_replay_from_the_seed(tmp_path):
    first, recorded = record(tmp_path, STREAM)
    seed = recorded[0]
    assert seed["fn"] == "git_pf.seed" and len(bytes.fromhex(seed["v"])) == 32
    assert recorded[1:5] == [{"fn": "random.seed", "v": None}, {"fn": "uuid.uuid4", "v": None},
                             {"fn": "os.urandom", "v": 5}, {"fn": "random.seed", "v": None}]
    assert seed["v"] not in first.stdout and len(set(first.stdout.split())) == 9  # no value repeats
    replayed = spawn(tmp_path, STREAM, "replay", replay=replay_file(tmp_path, recorded))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == first.stdout
    other = dict(seed, v="00" * 32)  # another seed: other bytes, though the sizes are the same
    changed = spawn(tmp_path, STREAM, "replay", replay=replay_file(tmp_path, [other] + recorded[1:]))
    assert changed.returncode == 0 and changed.stdout.split()[0] != first.stdout.split()[0]
    bigger = spawn(tmp_path, STREAM.replace("urandom(5)", "urandom(6)"), "replay", replay=replay_file(tmp_path, recorded))
    assert bigger.returncode == 86 and "where the recording has os.urandom of 5 bytes" in bigger.stderr


def test_a_run_going_live_does_not_draw_the_recorded_stream_again(tmp_path):
    first, recorded = record(tmp_path, STREAM)
    proc = spawn(tmp_path, STREAM, "run", replay=replay_file(tmp_path, recorded[:4], mode="run"))
    assert proc.returncode == 0, proc.stderr
    lines, recorded_lines = proc.stdout.split(), first.stdout.split()
    assert lines[:2] == recorded_lines[:2]  # served: the recorded seed's first uuid and bytes
    assert not set(lines[2:]) & set(recorded_lines)  # live: none of the recorded stream's next values
    live = [e for e in events(tmp_path) if e["t"] == "draw"]
    assert live[0]["fn"] == "git_pf.seed" and live[0]["v"] != recorded[0]["v"]


def test_a_streamed_draw_without_its_seed_diverges_and_a_bad_size_stays_an_error(tmp_path):
    code = "import os\ntry:\n    os.urandom(-1)\nexcept ValueError:\n    print('refused')\nprint(os.urandom(2).hex())\n"
    first, recorded = record(tmp_path, code)
    assert first.stdout.startswith("refused\n") and [d["fn"] for d in recorded][-1] == "os.urandom"
    assert spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, recorded)).stdout == first.stdout
    proc = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, recorded[1:]))
    assert proc.returncode == 86 and "the recorded random.seed draw has no seed before it" in proc.stderr


def test_draws_recorded_with_their_values_still_replay(tmp_path):
    old = [{"fn": "random.seed", "v": 12345}, {"fn": "uuid.uuid4", "v": "6f1c1d9e-0c1a-4d63-9a43-8d1b0e0f5b2c"},
           {"fn": "os.urandom", "v": "00ff10"}, {"fn": "random.seed", "v": 7}]
    proc = spawn(tmp_path, "import os, random, uuid\nprint(uuid.uuid4(), os.urandom(3).hex(), random.Random().random())\n",
                 "replay", replay=replay_file(tmp_path, old))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["6f1c1d9e-0c1a-4d63-9a43-8d1b0e0f5b2c", "00ff10", str(__import__("random").Random(7).random())]


def test_the_hook_chains_to_the_next_sitecustomize(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import builtins\nbuiltins.OTHER_SITE = 'ran'\n")
    base = dict(_base(), PYTHONPATH=str(other))
    code = "import time\nprint(OTHER_SITE, type(time.time).__name__)\n"
    hooked = spawn(tmp_path, code, "record", base=base)
    assert hooked.returncode == 0, hooked.stderr
    assert hooked.stdout == "ran function\n"
    unset = spawn(tmp_path, code, None, base=dict(base, PYTHONPATH=f"{HOOK_DIR}{os.pathsep}{other}"))
    assert unset.returncode == 0, unset.stderr
    assert unset.stdout == "ran builtin_function_or_method\n"


def test_without_a_mode_the_hook_does_nothing(tmp_path):
    code = """
    import datetime, os, sys, time
    print(type(time.time).__name__, type(os.urandom).__name__, datetime.datetime.__module__,
          type(datetime.datetime).__name__, 'random' in sys.modules, '_git_pf_hook' in sys.modules,
          'GIT_PF_OWNER' in os.environ)
    """
    proc = spawn(tmp_path, code, None, base=dict(_base(), PYTHONPATH=str(HOOK_DIR)))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "builtin_function_or_method builtin_function_or_method datetime type False False False\n"
    assert list(tmp_path.iterdir()) == [tmp_path / "child.py"]


def test_without_inject_the_child_is_not_hooked(tmp_path):
    proc = spawn(tmp_path, "import os, time\nprint(type(time.time).__name__, os.environ['GIT_PF_MODE'])\n",
                 "record", inject=False)
    assert proc.stdout == "builtin_function_or_method record\n"
    assert not (tmp_path / "channel").exists()


def test_threads_draw_under_a_lock_and_replay(tmp_path):
    code = """
    import threading, time
    out = []
    def work():
        out.extend(time.time() for _ in range(500))
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(len(out), round(sum(out), 3))
    """
    first, recorded = record(tmp_path, code)
    assert len(recorded) == 2 + 8 * 500  # every line whole: ChannelReader found no bad line
    replayed = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, recorded))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == first.stdout


def test_a_process_the_child_starts_is_not_part_of_the_run(tmp_path):
    code = """
    import subprocess, sys, time
    print(time.time())
    subprocess.run([sys.executable, "-c", "import time; time.time(); time.time()"], check=True)
    print(time.time())
    """
    first, recorded = record(tmp_path, code)
    assert [d["fn"] for d in recorded] == ["git_pf.seed", "random.seed", "time.time", "time.time"]
    replayed = spawn(tmp_path, code, "replay", replay=replay_file(tmp_path, recorded))
    assert replayed.returncode == 0, replayed.stderr
    assert replayed.stdout == first.stdout


def test_a_damaged_replay_file_stops_the_child_with_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    proc = spawn(tmp_path, "print('ran')\n", "replay", replay=bad)
    assert proc.returncode == 86 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "cannot read the replay file" in proc.stderr


@pytest.mark.parametrize("draw, problem", [
    ({"fn": "time.sleep", "v": 1}, "unknown draw function"),
    ({"fn": "os.urandom", "v": "zz"}, "not a hex"),
    ({"fn": "time.time", "v": "soon"}, "not a number"),
    ({"fn": "uuid.uuid4"}, "fn and v"),
    ({"fn": "uuid.uuid1", "v": None}, "not a uuid"),
    ({"fn": "os.urandom", "v": -1}, "not a hex"),
    ({"fn": "git_pf.seed", "v": "ab" * 31}, "not a seed"),
    (["time.time", 1.0], "fn and v"),
])
def test_write_replay_file_refuses_bad_draws(tmp_path, draw, problem):
    with pytest.raises(DataError, match=problem):
        write_replay_file(tmp_path / "r.json", draws=[{"fn": "time.time", "v": 1.5}, draw], effects=[],
                          allow_effects=False, mode="replay")
    assert not (tmp_path / "r.json").exists()
    with pytest.raises(UsageError):
        write_replay_file(tmp_path / "r.json", draws=[], effects=[], allow_effects=False, mode="record")


def test_the_channel_reader_keeps_a_partial_line_and_counts_bad_ones(tmp_path):
    path = tmp_path / "channel"
    reader = ChannelReader(path)
    assert reader.new_events() == []
    path.write_bytes(b'{"t":"draw","fn":"time.time","v":1.5}\nnot json\n{"t":"dr')
    assert reader.new_events() == [{"t": "draw", "fn": "time.time", "v": 1.5}]
    with open(path, "ab") as f:
        f.write(b'aw","fn":"time.time_ns","v":7}\n')
    assert reader.new_events() == [{"t": "draw", "fn": "time.time_ns", "v": 7}]
    assert reader.bad == 1


def test_child_env_sets_the_run_and_puts_the_hook_first(tmp_path):
    base = {"PATH": "/bin", "PYTHONPATH": f"elsewhere{os.pathsep}{HOOK_DIR}", "GIT_PF_OWNER": "1",
            "GIT_PF_REPLAY": "old"}
    env = child_env(base, mode="replay", channel=tmp_path / "c", replay_file=None)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(HOOK_DIR), "elsewhere"]
    assert env["GIT_PF_MODE"] == "replay" and env["GIT_PF_CHANNEL"] == str(tmp_path / "c")
    assert "GIT_PF_OWNER" not in env and "GIT_PF_REPLAY" not in env and env["PATH"] == "/bin"
    assert (HOOK_DIR / "sitecustomize.py").is_file()
    with pytest.raises(UsageError, match="run mode"):
        child_env(base, mode="rewind", channel=tmp_path / "c", replay_file=None)


def test_the_hook_imports_nothing_of_git_pf():
    from tests.test_architecture import import_graph

    graph = import_graph()
    assert graph["git_pf.runs.hook.sitecustomize"] == set()
    assert "git_pf.runs.hook.sitecustomize" in graph["git_pf.runs.tools"]
