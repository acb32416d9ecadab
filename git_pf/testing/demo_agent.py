"""A small agent loop on the real ``openai`` / ``anthropic`` SDKs (the ``dev`` extra), the agent of
``make demo``, of the record / replay tests and of the record benchmark:

    python -m git_pf.testing.demo_agent --api openai.chat|openai.responses|anthropic [--stream] [--steps 5]
        --sandbox DIR [--async] [--concurrent] [--effects-file PATH] [--secret TEXT] [--plain-prompts]

The sandbox is ``$GIT_PF_WORLD`` when git pf sets it (the world of the run: ``--fs-root`` when recording,
the checked-out step world when replaying or running on), else ``--sandbox``.

Each step draws the clock, a uuid, random numbers and urandom bytes, puts them in the prompt and in
``DIR/log.txt``, and makes one LLM call (base URL from ``OPENAI_BASE_URL`` / ``ANTHROPIC_BASE_URL``, as
the recording proxy sets them). Tool calls in the replies run: ``read_file`` and ``write_file`` inside
the sandbox, and ``notify``, an irreversible ``@git_pf.tool`` that appends to the effects file outside
the sandbox (``--effects-file`` or ``AGENT_EFFECTS_FILE``; by default ``effects.log`` beside the sandbox),
also called by the agent itself once after step 2. A text reply is written to ``notes/step-NN.txt``.
``--concurrent`` sends step 2 together with a side "critic" request (two requests in flight: threads, or
``asyncio.gather`` with ``--async``); both count as exchanges. The last line on stdout, ``agent: {...}``,
sums up what it did and is the same whenever the replies and draws are. ``--plain-prompts`` keeps the draws
out of the prompts (log.txt only), for recorders that cannot replay draws.

It touches the sandbox, the effects file and its LLM endpoint, nothing else; no git-pf module imports it.
"""
from __future__ import annotations

import argparse
import asyncio
import datetime
import hashlib
import json
import os
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import git_pf

KEY = "sk-test-agentkey-7d1e0c4b9a8f6e5d3c2b1a0f9e8d7c6b5a4f3e2d"
MODELS = {"openai.chat": "gpt-4o-mini", "openai.responses": "gpt-4o-mini", "anthropic": "claude-3-5-haiku-latest"}
TOOLS = [("read_file", "Read a file of the sandbox.", {"path": "string"}),
         ("write_file", "Write a file of the sandbox.", {"path": "string", "content": "string"}),
         ("notify", "Send a notification to the operator (cannot be undone).", {"message": "string"})]
EFFECTS: Path = Path("effects.log")


@git_pf.tool(side_effect="irreversible")
def notify(message: str) -> str:
    with open(EFFECTS, "a", encoding="utf-8") as f:
        f.write(message + "\n")
    return f"sent {len(message)} chars"


def _schema(props: dict) -> dict:
    return {"type": "object", "properties": {k: {"type": t} for k, t in props.items()}, "required": list(props)}


class Conversation:
    """One conversation in one api's own message format; replies come back as
    ``{"text": str, "calls": [{"id", "name", "args"}]}``."""

    def __init__(self, api: str, system: str):
        self.api, self.system, self.items = api, system, []

    def user(self, text: str, results: list[tuple[str, str]] = ()) -> None:
        if self.api == "openai.chat":
            self.items += [{"role": "tool", "tool_call_id": cid, "content": out} for cid, out in results]
            self.items.append({"role": "user", "content": text})
        elif self.api == "openai.responses":
            self.items += [{"type": "function_call_output", "call_id": cid, "output": out} for cid, out in results]
            self.items.append({"role": "user", "content": text})
        else:
            blocks = [{"type": "tool_result", "tool_use_id": cid, "content": out} for cid, out in results]
            self.items.append({"role": "user", "content": blocks + [{"type": "text", "text": text}]})

    def request(self, tools: bool = True) -> dict:
        if self.api == "openai.chat":
            kw = {"messages": [{"role": "system", "content": self.system}] + self.items}
            specs = [{"type": "function", "function": {"name": n, "description": d, "parameters": _schema(p)}}
                     for n, d, p in TOOLS]
        elif self.api == "openai.responses":
            kw = {"instructions": self.system, "input": list(self.items)}
            specs = [{"type": "function", "name": n, "description": d, "parameters": _schema(p), "strict": False}
                     for n, d, p in TOOLS]
        else:
            kw = {"system": self.system, "messages": list(self.items), "max_tokens": 256}
            specs = [{"name": n, "description": d, "input_schema": _schema(p)} for n, d, p in TOOLS]
        return dict(kw, model=MODELS[self.api], **({"tools": specs} if tools else {}))

    def take(self, reply) -> dict:
        """Parse an SDK reply object and append it to the conversation."""
        text, calls = "", []
        if self.api == "openai.chat":
            msg = reply.choices[0].message
            text = msg.content or ""
            calls = [(c.id, c.function.name, c.function.arguments) for c in msg.tool_calls or ()]
            self.items.append({"role": "assistant", "content": text, **({"tool_calls": [
                {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in calls]}
                if calls else {})})
        elif self.api == "openai.responses":
            for item in reply.output:
                if item.type == "message":
                    text += "".join(c.text for c in item.content if c.type == "output_text")
                elif item.type == "function_call":
                    calls.append((item.call_id, item.name, item.arguments))
            if text or not calls:
                self.items.append({"role": "assistant", "content": text})
            self.items += [{"type": "function_call", "call_id": i, "name": n, "arguments": a} for i, n, a in calls]
        else:
            text = "".join(b.text for b in reply.content if b.type == "text")
            calls = [(b.id, b.name, json.dumps(b.input, sort_keys=True)) for b in reply.content if b.type == "tool_use"]
            blocks = ([{"type": "text", "text": text}] if text else []) + [
                {"type": "tool_use", "id": i, "name": n, "input": json.loads(a)} for i, n, a in calls]
            self.items.append({"role": "assistant", "content": blocks or [{"type": "text", "text": "(empty)"}]})
        return {"text": text, "calls": [{"id": i, "name": n, "args": _args(a)} for i, n, a in calls]}


def _args(text: str):
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


class Client:
    """The SDK call for one api, sync or async, JSON or streamed (through the SDK's stream helpers)."""

    def __init__(self, api: str, stream: bool, is_async: bool):
        import anthropic
        import openai

        key = os.environ.get("OPENAI_API_KEY" if api != "anthropic" else "ANTHROPIC_API_KEY") or KEY
        if api == "anthropic":
            self.sdk = (anthropic.AsyncAnthropic if is_async else anthropic.Anthropic)(api_key=key, timeout=60)
            self.res = self.sdk.messages
        else:
            self.sdk = (openai.AsyncOpenAI if is_async else openai.OpenAI)(api_key=key, timeout=60)
            self.res = self.sdk.chat.completions if api == "openai.chat" else self.sdk.responses
        self.api, self.stream = api, stream
        self.final = {"openai.chat": "get_final_completion", "openai.responses": "get_final_response",
                      "anthropic": "get_final_message"}[api]

    def call(self, kw: dict):
        if not self.stream:
            return self.res.create(**kw)
        with self.res.stream(**kw) as s:
            return getattr(s, self.final)()

    async def acall(self, kw: dict):
        if not self.stream:
            return await self.res.create(**kw)
        async with self.res.stream(**kw) as s:
            return await getattr(s, self.final)()


class Agent:
    """The loop's logic, apart from how requests are sent: ``calls()`` gives the requests of the next
    exchange(s), ``took(replies)`` runs their tools and writes their notes."""

    def __init__(self, args):
        self.args, self.sandbox = args, Path(args.sandbox).resolve()
        secret = f" The operator's token is {args.secret}." if args.secret else ""
        self.conv = Conversation(args.api, "You are a careful file agent." + secret)
        self.step, self.exchanges, self.results, self.log = 0, 0, [], []
        self.tools_run: list[str] = []
        self.last = ""

    @property
    def done(self) -> bool:
        return self.exchanges >= self.args.steps

    def calls(self) -> list[dict]:
        self.step += 1
        now, today = time.time(), datetime.datetime.now().isoformat(timespec="seconds")
        uid, roll, r, salt = uuid.uuid4(), random.randint(1, 6), random.random(), os.urandom(4).hex()
        line = f"step {self.step}: id {uid} roll {roll} r {r:.6f} salt {salt} at {int(now)} on {today}"
        self.log.append(line)
        (self.sandbox / "log.txt").write_text("\n".join(self.log) + "\n")
        said = f"step {self.step}" if self.args.plain_prompts else line  # plain: the draws stay in log.txt
        self.conv.user(said + ". Go on with the task in task.md.", self.results)
        self.results = []
        reqs = [self.conv.request()]
        if self.args.concurrent and self.step == 2 and self.args.steps - self.exchanges >= 2:
            critic = Conversation(self.args.api, "You are a critic.")
            critic.user(f"critic: review {len(self._files())} files after {said}")
            reqs.append(critic.request(tools=False))
        return reqs

    def took(self, replies: list) -> None:
        self.exchanges += len(replies)
        main = self.conv.take(replies[0])
        if len(replies) > 1:
            side = Conversation(self.args.api, "").take(replies[1])
            self._write("critic.txt", side["text"])
        for call in main["calls"]:
            self.results.append((call["id"], self._tool(call["name"], call["args"])))
        if main["text"]:
            self._write(f"notes/step-{self.step:02d}.txt", main["text"])
        self.last = main["text"]
        if self.step == 2:
            self.tools_run.append("notify")
            notify(f"halfway: {len(self._files())} files, last reply {hashlib.sha256(self.last.encode()).hexdigest()[:12]}")

    def _tool(self, name: str, args) -> str:
        self.tools_run.append(name)
        if not isinstance(args, dict):
            return "error: arguments are not a JSON object"
        if name == "notify":
            return notify(str(args.get("message", "")))
        path = self._path(str(args.get("path", "")))
        if path is None:
            return "error: path outside the sandbox"
        if name == "read_file":
            return path.read_text(errors="replace") if path.is_file() else "error: no such file"
        if name == "write_file":
            self._write(str(path.relative_to(self.sandbox)), str(args.get("content", "")))
            return "ok"
        return f"error: unknown tool {name}"

    def _path(self, rel: str) -> Path | None:
        p = (self.sandbox / rel).resolve()
        return p if rel and p.is_relative_to(self.sandbox) and p != self.sandbox else None

    def _write(self, rel: str, text: str) -> None:
        p = self.sandbox / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)

    def _files(self) -> list[str]:
        return sorted(str(p.relative_to(self.sandbox)) for p in self.sandbox.rglob("*") if p.is_file())

    def summary(self) -> dict:
        files = {f: hashlib.sha256((self.sandbox / f).read_bytes()).hexdigest()[:12] for f in self._files()}
        convo = hashlib.sha256(json.dumps(self.conv.items, sort_keys=True).encode()).hexdigest()[:16]
        return {"api": self.args.api, "exchanges": self.exchanges, "steps": self.step, "tools": self.tools_run,
                "files": files, "last": self.last, "conversation": convo}


def run_sync(agent: Agent, client: Client) -> None:
    with ThreadPoolExecutor(2) as pool:
        while not agent.done:
            reqs = agent.calls()
            agent.took([client.call(reqs[0])] if len(reqs) == 1 else list(pool.map(client.call, reqs)))


async def run_async(agent: Agent, client: Client) -> None:
    while not agent.done:
        agent.took(list(await asyncio.gather(*(client.acall(r) for r in agent.calls()))))


def main(argv: list[str]) -> int:
    global EFFECTS
    ap = argparse.ArgumentParser(prog="python -m git_pf.testing.demo_agent")
    ap.add_argument("--api", choices=["openai.chat", "openai.responses", "anthropic"], required=True)
    ap.add_argument("--stream", action="store_true")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--sandbox", help="the sandbox directory (default and overridden by $GIT_PF_WORLD, the world "
                    "git pf records, replays or runs on)")
    ap.add_argument("--async", dest="is_async", action="store_true")
    ap.add_argument("--concurrent", action="store_true")
    ap.add_argument("--effects-file", default=os.environ.get("AGENT_EFFECTS_FILE"))
    ap.add_argument("--secret", default=os.environ.get("AGENT_SECRET"))
    ap.add_argument("--plain-prompts", action="store_true",
                    help="keep the draws out of the prompts (for recorders that do not replay them)")
    args = ap.parse_args(argv)
    args.sandbox = os.environ.get("GIT_PF_WORLD") or args.sandbox
    if not args.sandbox:
        ap.error("--sandbox is required outside git pf record / replay / run")
    sandbox = Path(args.sandbox)
    sandbox.mkdir(parents=True, exist_ok=True)
    EFFECTS = Path(args.effects_file) if args.effects_file else sandbox.resolve().parent / "effects.log"
    if not (sandbox / "task.md").exists():
        (sandbox / "task.md").write_text("Keep notes of every step in notes/.\n")
    agent, client = Agent(args), Client(args.api, args.stream, args.is_async)
    import anthropic
    import openai

    try:
        asyncio.run(run_async(agent, client)) if args.is_async else run_sync(agent, client)
    except (openai.APIError, anthropic.APIError) as e:
        print(f"agent: error at step {agent.step}: {type(e).__name__}: {str(e)[:200]}", file=sys.stderr)
        return 3
    print("agent: " + json.dumps(agent.summary(), sort_keys=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
