"""Record overhead, replay speed and tape size of ``git pf record`` / ``git pf replay``, against calling
the same fake LLM server directly and against tracefork, in one run.

    python -m benchmarks.bench_record [--exchanges 200] [--tape 1000] [--world-files 1000]
                                      [--step-world-files 5000] [--growth-steps 1000] [--agent-steps 20]
                                      [--no-tracefork]

- overhead: a lean client (benchmarks/record_client.py) makes N exchanges with the fake server directly,
  then as the child of ``git pf record --no-inject`` (the proxy alone) and of ``git pf record`` (proxy and
  in-process draws); latency per exchange as the client sees it, and the cost of a draw. The step
  snapshot is timed on its own (StepWriter.arrived + completed of a recorded entry, same world).
- step images: the same, in a 5,000-file world with one file changed per step (goal <= 20 ms).
- replay: ``git pf replay`` of a 1,000-exchange run, against the same child run directly.
- step growth: the step cost early and late in a 1,000-step run in the recording process, and the
  tape tree a step writes.
- storage: the finished tape (the run's last trace/tape tree and its chunks) and every tape object
  the steps wrote, packed, against the zstd size of the request and response bodies it holds (and
  of its entries) compressed as one stream; and the chunks of its exchanges alone (without the run's
  end entry, whose draws appear in no body).
- tracefork: the agent app (real anthropic SDK) recorded and replayed by both tools through their
  localhost proxies: record time, replay time, tape size (skipped with the reason when tracefork
  cannot be installed).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import zstandard

from git_pf.testing.fakellm import FakeLLM

from .common import git_env, report, sh, verdict, workdir


CLIENT = Path(__file__).with_name("record_client.py")
AGENT = ["-m", "git_pf.testing.demo_agent"]
PF = str(Path(sys.executable).with_name("git-pf")) if Path(sys.executable).with_name("git-pf").exists() else "git-pf"


class BenchError(RuntimeError):
    pass


def run(cmd: list, cwd: Path, env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    proc = subprocess.run(list(map(str, cmd)), cwd=cwd, env=env, capture_output=True, text=True, timeout=900)
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise BenchError(f"{' '.join(map(str, cmd[:3]))} exited {proc.returncode}: "
                         f"{(proc.stderr.strip() or proc.stdout.strip())[-300:]}")
    return took, proc


def client_result(stdout: str) -> dict:
    lines = [l for l in stdout.splitlines() if l.startswith("client: ")]
    if not lines:
        raise BenchError(f"the client printed no result: {stdout[-200:]!r}")
    return json.loads(lines[-1].removeprefix("client: "))


def make_world(root: Path, files: int) -> Path:
    for i in range(files):
        d = root / f"d{i % 20:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    return root


def new_repo(path: Path, env: dict) -> Path:
    sh("git", "init", "-q", path, env=env)
    return path


def record(repo: Path, env: dict, fake: FakeLLM, name: str, world: Path, child: list, *extra):
    return run([PF, "record", "--name", name, "--fs-root", world, "--upstream", fake.url, *extra, "--", *child],
               repo, env)


def step_times(repo: Path, branch: str, world: Path, steps: int = 40) -> tuple[list[float], int]:
    """Seconds of StepWriter.arrived + completed (one step image) per step, one file changed per step,
    and the bytes of the last step's trace/tape tree."""
    from git_pf import Repo
    from git_pf.image.tree import blob_size, lookup
    from git_pf.runs.steps import StepWriter, run_plan

    r = Repo.open(repo)
    entry = {k: v for k, v in run_plan(r.git, branch).entries[0].items() if k not in ("step", "draws")}
    writer = StepWriter(r, branch + "-probe", world)
    times = []
    try:
        writer.start()
        for i in range(1, steps + 1):
            (world / "probe.txt").write_text(f"step {i}\n")
            t0 = time.perf_counter()
            token = writer.arrived(i)
            last = writer.completed(token, dict(entry, arrival=i, batch=i))
            times.append(time.perf_counter() - t0)
        writer.finish(0)
    finally:
        writer.close()
    tape_tree = lookup(r.git, bytes.fromhex(last.tree), b"trace/tape")[1]
    return times, blob_size(r.git, tape_tree)


def step_snapshot_ms(repo: Path, branch: str, world: Path, steps: int = 40) -> float:
    """Median time of StepWriter.arrived + completed (one step image), one file changed per step."""
    return statistics.median(step_times(repo, branch, world, steps)[0]) * 1000


def bench_overhead(base: Path, fake: FakeLLM, n: int, files: int) -> list:
    env = git_env()
    repo, world = new_repo(base / "repo", env), make_world(base / "world", files)
    child = [sys.executable, CLIENT, n, world]
    direct_s, proc = run(child, base, dict(env, OPENAI_BASE_URL=fake.openai_url))
    direct = client_result(proc.stdout)
    rows = [(f"direct to the fake, {n} exchanges", f"{direct['mean_ms']:.2f} ms/exch", f"p50 {direct['p50_ms']:.2f} ms")]
    results = {}
    for name, extra in (("proxy", ("--no-inject",)), ("hooked", ())):
        took, proc = record(repo, env, fake, name, world, child, *extra)
        results[name] = (took, client_result(proc.stdout))
    try:
        snap = step_snapshot_ms(repo, "hooked", world)
    except Exception as e:  # the step writer's API is another module's; say why, measure the rest
        print(f"  (step snapshot not timed on its own: {type(e).__name__}: {e})")
        snap = 0.0
    for name, label in (("proxy", "record, proxy only (--no-inject)"), ("hooked", "record, proxy + draws")):
        took, res = results[name]
        over = res["mean_ms"] - direct["mean_ms"]
        rows += [(label, f"{res['mean_ms']:.2f} ms/exch", f"p50 {res['p50_ms']:.2f} ms"),
                 ("  overhead per exchange", f"+{over:.2f} ms",
                  f"goal <= 2 ms + step {snap:.1f} ms  {verdict(over <= 2.0 + snap)}"),
                 ("  whole command, per exchange", f"{(took - direct_s) / n * 1000:+.2f} ms", "start, steps, end")]
    hooked = results["hooked"][1]
    rows += [(f"step snapshot alone ({files}-file world)", f"{snap:.2f} ms", "StepWriter.arrived + completed"),
             ("a draw: plain / recorded by the hook", f"{direct['draw_us']:.2f} / {hooked['draw_us']:.2f} us",
              f"{hooked['draw_us'] / max(direct['draw_us'], 1e-9):.0f}x")]
    return rows


def bench_step_images(base: Path, fake: FakeLLM, files: int) -> list:
    """One step image (StepWriter.arrived + completed) in the long-lived recording process, for a
    world of ``files`` files in which one file changes per step."""
    env = git_env()
    repo, world = new_repo(base / "steps-repo", env), make_world(base / "steps-world", files)
    record(repo, env, fake, "one", world, [sys.executable, CLIENT, 1, world])
    time.sleep(0.2)  # past the stat cache's racy window, as an agent's older files are
    ms = step_snapshot_ms(repo, "one", world)
    return [(f"step image, {files}-file world, 1 file changed", f"{ms:.2f} ms",
             f"goal <= 20 ms  {verdict(ms <= 20)}")]


def bench_step_growth(base: Path, fake: FakeLLM, steps: int) -> list:
    """One run of ``steps`` step images in the long-lived recording process (a 50-file world, one file
    changed per step): the step cost early and late in the run, and the tape tree a step writes."""
    env = git_env()
    repo, world = new_repo(base / "growth-repo", env), make_world(base / "growth-world", 50)
    record(repo, env, fake, "one", world, [sys.executable, CLIENT, 1, world])
    times, tree_bytes = step_times(repo, "one", world, steps)
    first, last = (statistics.median(t) * 1000 for t in (times[:100], times[-100:]))
    return [(f"steps 1-100 of {steps}, median", f"{first:.2f} ms", ""),
            (f"steps {steps - 99}-{steps}, median", f"{last:.2f} ms",
             f"late / early {last / first:.2f}x  goal <= 1.2x  {verdict(last <= 1.2 * first)}"),
            (f"the tape tree step {steps} writes", f"{tree_bytes / 1024:.1f} KiB", "")]


def tape_objects(repo: Path, branch: str) -> tuple[list[str], list[str], list[bytes], list[bytes]]:
    """``pack-objects`` input lines of every tape object the run's steps wrote (each step's trace/tape
    tree, its loose entries and chunks) and of the finished tape alone (the tip's tree and its
    chunks), the request and response bodies of the tip's tape, and its entries' bytes (the end's too)."""
    from git_pf import Repo
    from git_pf.image.tree import lookup, read_tree
    from git_pf.layers.trace import exchange, tape

    r = Repo.open(repo)
    git, tip = r.git, r.resolve(branch)
    lines: dict[bytes, str] = {}
    for commit in git.walk(tip.id):
        found = lookup(git, commit.tree_id.raw, tape.PATH)  # step 0 has no tape
        if found:
            lines[found[1]] = "trace/tape"
            lines.update((oid, name.decode()) for name, _, oid in read_tree(git, found[1]))
    found = lookup(git, bytes.fromhex(tip.tree), tape.PATH)
    finished = [f"{found[1].hex()} trace/tape"] + [f"{oid.hex()} {name.decode()}" for name, oid in tape.items(git, tip.tree)]
    bodies, entries = [], []
    for _, data, where in tape.stored(git, tip.tree):
        entry = tape.parse(data, where)
        entries.append(data)
        if entry.get("kind") == "exchange":
            bodies += [exchange.body_bytes(entry["request"]["body"]), exchange.response_bytes(entry["response"])]
    return [f"{oid.hex()} {name}" for oid, name in lines.items()], finished, bodies, entries


def tape_size_of(entries: list[bytes]) -> int:
    """The bytes of the chunks a sealed tape of ``entries`` is stored in (docs/format.md §8.1)."""
    from git_pf.layers.trace import tape

    files = [(tape.entry_name(seq, data), data) for seq, data in enumerate(entries)]
    return sum(len(blob) for _, blob in tape.layout(files, sealed=True))


def packed_size(repo: Path, lines: list[str]) -> int:
    proc = subprocess.run(["git", "pack-objects", "--stdout", "-q"], cwd=repo, capture_output=True,
                          input=("\n".join(lines) + "\n").encode())
    if proc.returncode != 0:
        raise BenchError(f"git pack-objects failed: {proc.stderr.decode()[-200:]}")
    return len(proc.stdout)


def storage_rows(repo: Path, branch: str, label: str) -> tuple[list, int]:
    """Packed size of the finished tape (the tip's trace/tape tree and its chunks) and of every tape
    object the run's steps wrote, against zstd -3 of the bodies, compressed as one stream and each on
    its own, and of the tape's entries as one stream."""
    written, finished, bodies, entries = tape_objects(repo, branch)
    trees = [l for l in written if l.endswith(" trace/tape")]
    tape_size, all_size, trees_size = (packed_size(repo, x) for x in (finished, written, trees))
    zc = zstandard.ZstdCompressor(level=3)
    whole, each = len(zc.compress(b"".join(bodies))), sum(len(zc.compress(b)) for b in bodies)
    raw, entries_z = sum(map(len, bodies)), len(zc.compress(b"".join(entries)))
    exchanges = tape_size_of([e for e in entries if b'"kind":"end"' not in e])
    return [(f"{label}: bodies raw", f"{raw / 1024:.1f} KiB", f"{len(bodies) // 2} exchanges"),
            ("  zstd -3, each body / all as one stream", f"{each / 1024:.1f} / {whole / 1024:.1f} KiB", ""),
            ("  zstd -3 of the tape's entries as one stream", f"{entries_z / 1024:.1f} KiB",
             "bodies, headers, draws, timings"),
            (f"  finished tape packed ({len(finished)} objects)", f"{tape_size / 1024:.1f} KiB", ""),
            ("  finished tape / zstd of its entries as one stream", f"{tape_size / entries_z:.2f}x",
             f"goal <= 1.2x  {verdict(tape_size <= 1.2 * entries_z)}"),
            ("  finished tape / zstd of the bodies alone as one stream", f"{tape_size / whole:.2f}x",
             f"goal <= 1.2x  {verdict(tape_size <= 1.2 * whole)}"),
            ("  ... its exchanges alone (no end entry: its draws are in no body)", f"{exchanges / whole:.2f}x",
             f"{exchanges / 1024:.1f} KiB of chunks"),
            (f"  every tape object the steps wrote, packed ({len(written)}; trees alone)",
             f"{all_size / 1024:.1f} KiB ({trees_size / 1024:.1f})", f"{all_size / whole:.2f}x the bodies' stream"),
            ], tape_size


def bench_replay(base: Path, fake: FakeLLM, n: int) -> list:
    env = git_env()
    repo, world = new_repo(base / "repo-tape", env), base / "world-tape"
    world.mkdir()
    child = [sys.executable, CLIENT, n, world]
    direct_s, _ = run(child, base, dict(env, OPENAI_BASE_URL=fake.openai_url))
    rec_s, _ = record(repo, env, fake, "tape", world, child)
    rep_s, proc = run([PF, "replay", "tape", "--fs-root", base / "replayed", "--json", "--", *child], repo, env)
    rep, lines = client_result(proc.stdout), proc.stdout.splitlines()
    starts = [i for i, l in enumerate(lines) if l == "{"]
    exact = json.loads("\n".join(lines[starts[-1]:])).get("bit_exact") if starts else None
    return [(f"record of {n} exchanges ({n} step images)", f"{rec_s:.2f} s", f"{rec_s / n * 1000:.1f} ms per step"),
            ("the same child, direct to the fake", f"{direct_s:.2f} s", "reference"),
            (f"replay of the {n}-exchange tape", f"{rep_s:.2f} s", f"goal <= 1 s  {verdict(rep_s <= 1.0)}"),
            ("  replay less the child's own run", f"{rep_s - direct_s:+.2f} s",
             f"{rep['mean_ms']:.2f} ms/exch seen; bit-exact: {exact}")
            ] + storage_rows(repo, "tape", f"{n}-exchange tape")[0]


def bench_tracefork(base: Path, fake: FakeLLM, steps: int, skip: bool) -> list:
    from . import record_tracefork as tf

    env = git_env()
    repo, sandbox, effects = new_repo(base / "repo-agent", env), base / "pf-sandbox", base / "effects.log"
    sandbox.mkdir()
    agent = [sys.executable, *AGENT, "--api", "anthropic", "--steps", steps, "--plain-prompts", "--effects-file", effects]
    rec_s, rec = record(repo, env, fake, "agent", sandbox, agent)
    before = tf.lines_of(effects)
    rep_s, rep = run([PF, "replay", "agent", "--", *agent], repo, env)
    same = tf.outcome(rep.stdout) == tf.outcome(rec.stdout) is not None
    files = same and tf.outcome(rep.stdout, True) == tf.outcome(rec.stdout, True)
    rows = [(f"git pf record, agent app ({steps} exchanges)", f"{rec_s:.2f} s", ""),
            ("git pf replay", f"{rep_s:.2f} s", _same(same, files, tf.lines_of(effects) - before))]
    storage, packed = storage_rows(repo, "agent", "agent tape")
    rows += storage
    if skip:
        return rows + [("tracefork", "skipped", "--no-tracefork")]
    try:
        got = tf.compare(base / "tracefork", [str(a) for a in agent], dict(env), fake.url, effects)
    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
        print(f"  tracefork part skipped: {e}")
        return rows + [("tracefork", "skipped", str(e)[:60])]
    return rows + [(f"tracefork {got['version']} proxy record", f"{got['record_s']:.2f} s",
                    f"git pf / tracefork {rec_s / got['record_s']:.2f}x"),
                   ("tracefork proxy replay", f"{got['replay_s']:.2f} s",
                    f"git pf / tracefork {rep_s / got['replay_s']:.2f}x"),
                   ("  its replay", "", _same(got["replay_same"], got["files_same"], got["effects_rerun"])
                    + ("" if got["replay_same"] else f" ({got['replay_error'][:40]})")),
                   ("tracefork tape (sqlite file)", f"{got['tape_bytes'] / 1024:.1f} KiB",
                    f"git pf packed / tracefork {packed / got['tape_bytes']:.2f}x")]


def _same(conversation: bool, files: bool, effects_rerun: int) -> str:
    return (("same conversation" if conversation else "CONVERSATION DIFFERS")
            + (", same files" if files else ", files differ") + f", tool body re-ran {effects_rerun}x")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="bench_record")
    ap.add_argument("--exchanges", type=int, default=200)
    ap.add_argument("--tape", type=int, default=1000)
    ap.add_argument("--world-files", type=int, default=1000)
    ap.add_argument("--agent-steps", type=int, default=20)
    ap.add_argument("--step-world-files", type=int, default=5000)
    ap.add_argument("--growth-steps", type=int, default=1000)
    ap.add_argument("--no-tracefork", action="store_true")
    args = ap.parse_args(argv)
    failed = False
    with workdir("record") as base, FakeLLM() as fake:
        for title, fn in (("Record overhead per exchange, against the fake LLM directly",
                           lambda: bench_overhead(base, fake, args.exchanges, args.world_files)),
                          (f"Step images of a {args.step_world_files}-file world",
                           lambda: bench_step_images(base, fake, args.step_world_files)),
                          (f"Step cost over a {args.growth_steps}-step run",
                           lambda: bench_step_growth(base, fake, args.growth_steps)),
                          (f"Replay of a {args.tape}-exchange tape, and its storage",
                           lambda: bench_replay(base, fake, args.tape)),
                          ("The agent app: git pf against tracefork",
                           lambda: bench_tracefork(base, fake, args.agent_steps, args.no_tracefork))):
            try:
                report(title, fn())
            except BenchError as e:
                print(f"\n## {title}\n  could not run: {e}")
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
