"""The scripted agent, model and oracle with which ``git pf blame --validate`` measures the engine
(docs/blame.md, "Validation"): a task of T steps (5..8) whose step F the model answers wrongly once, in
one of five fault classes, so the right answer of blame is known.

    python -m git_pf.testing.scripted init  --task-seed S DIR   # the task's starting world (task.json)
    python -m git_pf.testing.scripted agent --task-seed S [--sandbox DIR] [--verbose]
    python -m git_pf.testing.scripted check --task-seed S [--world DIR]

The agent works in ``$GIT_PF_WORLD`` (else ``--sandbox``, else the current directory): each step is one
OpenAI chat request to ``$OPENAI_BASE_URL`` (urllib, no SDK) whose reply, a JSON object in the message
text, tells it what to do; it does that and says what happened in its next request (silent unless
``--verbose``: its output would mix with a validation's report). The oracle exits 0
when the world holds the finished task, 1 (one line saying what is wrong) when it does not.
``ScriptedModel`` is the model: a script for the fake LLM server (``git_pf.testing.fakellm``) that answers
every step healthily and step F, the first time it is asked, with its fault (a transient fault: asked
again, the model answers healthily). Replies are a function of the task seed and the step alone.

Touches the world directory and its LLM endpoint, nothing else; only ``git_pf.blame.validate`` imports it.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import sys
import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

FAULTS = ("corrupted_output", "misleading_retrieval", "wrong_instruction", "dropped_message", "poisoned_argument")
LABELS = ("amber", "basalt", "cedar", "delta", "ember", "fjord", "granite", "harbor", "indigo", "juniper",
          "kelp", "lumen", "meadow", "nickel", "onyx", "prairie")
MODEL = "scripted-1"
TASK = "task.json"
OUT = "out"
INDEX = f"{OUT}/index.txt"
STEP_RE = re.compile(r"^step (\d+)/(\d+)\.")


# --- the task and its fault plan ---------------------------------------------------------------------------

def _digest(*parts) -> int:
    return int(hashlib.sha256(":".join(map(str, parts)).encode()).hexdigest()[:12], 16)


def task_steps(seed: int) -> int:
    """T, the number of steps of task ``seed`` (5..8)."""
    return 5 + _digest("steps", seed) % 4


def key(i: int) -> str:
    return f"r{i:02d}"


def value(seed: int, i: int) -> str:
    """What the model's tool computes for record ``i`` (a decimal number)."""
    return str(10**11 + _digest("value", seed, i) % (9 * 10**11))


def label(seed: int, i: int) -> str:
    """What the model retrieves for record ``i``."""
    return LABELS[_digest("label", seed, i) % len(LABELS)]


def task_json(seed: int) -> bytes:
    steps = task_steps(seed)
    spec = {"task": seed, "steps": steps, "records": [key(i) for i in range(1, steps + 1)],
            "goal": f"write {OUT}/rNN.txt for every record and list the records in {INDEX}, in order"}
    return (json.dumps(spec, sort_keys=True, indent=1) + "\n").encode()


def expected_files(seed: int) -> dict[str, bytes]:
    """Every file of the finished task (paths relative to the world) and its bytes."""
    steps = task_steps(seed)
    files = {TASK: task_json(seed), INDEX: "".join(f"{key(i)}\n" for i in range(1, steps + 1)).encode()}
    for i in range(1, steps + 1):
        files[f"{OUT}/{key(i)}.txt"] = f"{key(i)} {label(seed, i)} {value(seed, i)}\n".encode()
    return files


@dataclass(frozen=True)
class FaultPlan:
    """Task ``seed`` (``steps`` steps) whose step ``step`` is answered with fault ``fault`` once."""
    seed: int
    steps: int
    step: int
    fault: str

    def to_json(self) -> dict:
        return {"seed": self.seed, "steps": self.steps, "fault_step": self.step, "fault": self.fault}


def fault_plan(seed: int, fault: str | None = None) -> FaultPlan:
    """The plan of task ``seed``: its fault step drawn uniformly from 1..T with the seed, its class
    ``fault`` (default: drawn too)."""
    if fault is not None and fault not in FAULTS:
        raise ValueError(f"unknown fault class {fault!r} (one of {', '.join(FAULTS)})")
    rng = random.Random(f"pf-blame-validate:{seed}")
    steps = task_steps(seed)
    step = rng.randint(1, steps)
    return FaultPlan(seed, steps, step, fault or rng.choice(FAULTS))


# --- the model's replies ------------------------------------------------------------------------------------

def _text(action: dict | None) -> str:
    return "" if action is None else json.dumps(action, sort_keys=True, ensure_ascii=False)


def healthy_action(seed: int, i: int) -> dict:
    """The right instruction for step ``i``: write record i with what the tool computed and what
    retrieval found, then index it."""
    return {"step": i, "say": f"record {key(i)}: write it, then index it", "op": "write",
            "path": f"{OUT}/{key(i)}.txt", "tool_output": value(seed, i),
            "retrieved": {"key": key(i), "label": label(seed, i)}}


def faulty_action(plan: FaultPlan) -> dict | None:
    """Step ``plan.step``'s reply with the plan's fault (None: no message at all). Each class changes
    a different part of the reply, and each hurts the world differently (docs/blame.md, "Validation")."""
    seed, i = plan.seed, plan.step
    action = healthy_action(seed, i)
    if plan.fault == "corrupted_output":  # the tool's output arrives garbled: a wrong value is written
        v = action["tool_output"]
        action["tool_output"] = v[: len(v) // 2] + "\ufffd\ufffd" + v[len(v) // 2 + 2:]
    elif plan.fault == "misleading_retrieval":  # retrieval returns another record: wrong label, index off
        j = i % plan.steps + 1
        action["retrieved"] = {"key": key(j), "label": label(seed, j)}
    elif plan.fault == "wrong_instruction":  # told to do the wrong thing: the index so far is deleted
        action = {"step": i, "say": "start the index over", "op": "delete", "path": INDEX}
    elif plan.fault == "dropped_message":  # the reply never carries its message: the step does nothing
        return None
    elif plan.fault == "poisoned_argument":  # the path escapes out/: the record overwrites task.json
        action["path"] = f"{OUT}/../{TASK}"
    return action


def reply_text(seed: int, i: int, plan: FaultPlan | None = None) -> str:
    """The model's text for step ``i`` (faulty when ``plan`` says step i is the faulty one)."""
    if plan is not None and plan.step == i:
        return _text(faulty_action(plan))
    return _text(healthy_action(seed, i))


def step_of(request: dict) -> int | None:
    """The step a chat request is for, read from its last user message (None when it has none)."""
    users = [m for m in request.get("messages") or () if isinstance(m, dict) and m.get("role") == "user"]
    match = STEP_RE.match(str(users[-1].get("content"))) if users else None
    return int(match.group(1)) if match else None


class ScriptedModel:
    """A script for ``FakeLLM``: healthy replies, and the plan's fault the first time its step is asked."""

    def __init__(self, plan: FaultPlan):
        self.plan = plan
        self._lock = threading.Lock()
        self.faults_served = 0

    def __call__(self, api: str, request: dict, n: int) -> str:
        step = step_of(request) if api == "openai.chat" else None
        if step is None or not 1 <= step <= self.plan.steps:
            return "I can only answer the scripted task's steps."
        with self._lock:
            fault = step == self.plan.step and self.faults_served == 0
            self.faults_served += fault
        return reply_text(self.plan.seed, step, self.plan if fault else None)


# --- the agent ------------------------------------------------------------------------------------------------

class AgentError(Exception):
    pass


def _inside(world: Path, rel: str) -> Path | None:
    p = (world / rel).resolve()
    return p if rel and p.is_relative_to(world) and p != world else None


class Worker:
    """Does what the replies say in ``world``. Its tools are not idempotent, as a real agent's are
    not: each write appends the record's key to the index, and a delete says whether there was
    anything to delete. Doing the same replies again over a world they already made would index
    the records twice; a run on from a fork starts in step 0's world and does each step once."""

    def __init__(self, world: Path):
        self.world = world

    def act(self, text: str) -> str:
        """Do what a reply says; what happened, in one line (the next request says it)."""
        try:
            action = json.loads(text) if text.strip() else None
        except ValueError:
            action = None
        if not isinstance(action, dict):
            return "no instruction received"
        target = _inside(self.world, str(action.get("path") or ""))
        if target is None:
            return f"refused: path {action.get('path')!r} is outside the world"
        if action.get("op") == "delete":
            if not target.is_file():
                return f"nothing to delete at {action['path']}"
            target.unlink()
            return f"deleted {action['path']}"
        if action.get("op") != "write":
            return f"unknown op {action.get('op')!r}"
        found = action.get("retrieved") if isinstance(action.get("retrieved"), dict) else {}
        line = f"{found.get('key')} {found.get('label')} {action.get('tool_output')}\n"
        self._write(target, line)
        (self.world / INDEX).parent.mkdir(parents=True, exist_ok=True)
        with open(self.world / INDEX, "a", encoding="utf-8") as index:  # appended: not idempotent
            index.write(f"{found.get('key')}\n")
        return f"wrote {action['path']} ({len(line.encode())} bytes) and indexed {found.get('key')}"

    @staticmethod
    def _write(target: Path, text: str) -> None:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def _chat(base: str, messages: list[dict]) -> str:
    body = json.dumps({"model": MODEL, "messages": messages, "temperature": 0}, sort_keys=True).encode()
    req = urllib.request.Request(base.rstrip("/") + "/chat/completions", data=body, method="POST",
                                 headers={"content-type": "application/json",
                                          "authorization": "Bearer sk-scripted-agent-no-secret"})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            reply = json.loads(resp.read())
        return reply["choices"][0]["message"].get("content") or ""
    except urllib.error.HTTPError as e:
        raise AgentError(f"the model answered HTTP {e.code}") from None
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise AgentError(f"no usable reply from the model: {type(e).__name__}") from None


def run_agent(seed: int, world: Path, base: str) -> list[str]:
    """Run task ``seed``'s T steps in ``world``; what each step did."""
    steps = task_steps(seed)
    messages = [{"role": "system", "content": f"You run scripted task {seed} ({steps} steps); "
                                              f"reply to each step with one JSON instruction."}]
    done, said, worker = [], "start", Worker(world)
    for i in range(1, steps + 1):
        messages.append({"role": "user", "content": f"step {i}/{steps}. Last step: {said}."})
        text = _chat(base, messages)
        messages.append({"role": "assistant", "content": text})
        said = worker.act(text)
        done.append(said)
    return done


# --- the oracle ------------------------------------------------------------------------------------------------

def problems(seed: int, world: Path) -> list[str]:
    """What is wrong with ``world`` as task ``seed``'s result, one line per file (empty: the task is done)."""
    want = expected_files(seed)
    out = world / OUT
    have = sorted(p.relative_to(world).as_posix() for p in out.rglob("*") if p.is_file()) if out.is_dir() else []
    found = [f"{extra}: not a file of the task" for extra in sorted(set(have) - set(want))]
    for rel, data in want.items():
        p = world / rel
        if not p.is_file():
            found.append(f"{rel}: missing")
        elif p.read_bytes() != data:
            found.append(f"{rel}: wrong content")
    return found


# --- the command -----------------------------------------------------------------------------------------------

class _Args(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def _seed(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"a task seed is a number 0 or more, not {text!r}")
    return int(text)


def main(argv: list[str] | None = None) -> int:
    ap = _Args(prog="python -m git_pf.testing.scripted",
               description="The scripted agent and oracle of git pf blame --validate (docs/blame.md).")
    sub = ap.add_subparsers(dest="command", required=True)
    for name, helptext in (("init", "write the task's starting world into DIR"),
                           ("agent", "run the task's steps against $OPENAI_BASE_URL"),
                           ("check", "exit 0 when the world holds the finished task, 1 when not")):
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.error = ap.error  # one line, like the top level
        p.add_argument("--task-seed", type=_seed, required=True, metavar="S")
        if name == "init":
            p.add_argument("dir", metavar="DIR")
        elif name == "agent":
            p.add_argument("--sandbox", metavar="DIR", help="the world when $GIT_PF_WORLD is not set")
            p.add_argument("--verbose", action="store_true", help="say what each step did (default: silent)")
        else:
            p.add_argument("--world", metavar="DIR", help="default: $GIT_PF_WORLD, else the current directory")
    args = ap.parse_args(argv)
    if args.command == "init":
        world = Path(args.dir)
        world.mkdir(parents=True, exist_ok=True)
        (world / TASK).write_bytes(task_json(args.task_seed))
        return 0
    given = args.world if args.command == "check" else os.environ.get("GIT_PF_WORLD") or args.sandbox
    world = Path(given or os.environ.get("GIT_PF_WORLD") or ".").resolve()
    if not world.is_dir():
        print(f"{ap.prog}: error: the world {str(world)!r} is not a directory", file=sys.stderr)
        return 2
    if args.command == "check":
        found = problems(args.task_seed, world)
        print(f"fail: {'; '.join(found[:3])}{'; ...' if len(found) > 3 else ''}" if found else "ok: the task is done")
        return 1 if found else 0
    base = os.environ.get("OPENAI_BASE_URL")
    if not base:
        print(f"{ap.prog}: error: OPENAI_BASE_URL is not set (run the agent under git pf record)", file=sys.stderr)
        return 2
    try:
        done = run_agent(args.task_seed, world, base)
    except AgentError as e:
        print(f"agent: error: {e}", file=sys.stderr)
        return 3
    if args.verbose:
        print("\n".join(f"step {i}: {line}" for i, line in enumerate(done, 1)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
