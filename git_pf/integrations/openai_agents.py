"""OpenAI Agents SDK runs as image branches: ``PfRunHooks``, a ``RunHooks`` that snapshots.

``Runner.run(agent, input, hooks=PfRunHooks(repo, fs_root="sandbox"))`` writes
an image on the run's branch (``oa/<id>`` unless named) after each model
reply (a turn), each tool call and the agent's end: the sandbox directory
(world), the conversation so far as trace messages (the agent's instructions
as a system message, then the items in the Responses format the SDK sends and
receives) and every tool call in the effects ledger (``side_effects`` names
each tool's class; the default is irreversible). A state equal to the last
image writes nothing. Images carry ``Pf-Step: N`` so ``git pf log``,
``checkout --at-step`` and ``diff --at-step`` read them.

``pf_tools(agent, side_effects)`` (done by ``PfRunHooks`` at the agent's start)
routes every ``FunctionTool`` through ``git_pf.tool``, so under ``git pf
record``, ``replay`` and ``run`` each call goes on the run's ledger with its
class, and replay answers it from there, with nothing decorated by hand. Under
those commands (the run's channel in the environment) ``PfRunHooks`` draws
nothing and writes no images: the recorded run is the record. The SDK is
imported only here (the ``openai-agents`` extra). Writes images and the run's
branch; never touches the sandbox.
"""
from __future__ import annotations

import asyncio
import json
import os
import threading
import uuid
from pathlib import Path

from ..image import manifest as img, refs
from ..core import secrets
from ..core.errors import UsageError
from ..layers.effects import ledger as effects_mod
from ..runs import tools as tools_mod
from ..runs.steps import STEP_TRAILER, step_of
from ..runs.stepworld import Given, inherited
from ..ops.snapshot import DirWorld, SnapshotRequest, take
from .claude_code.session import tool_effect

try:
    from agents import FunctionTool, RunHooks
except ImportError as e:  # pragma: no cover - the extra is not installed
    raise ImportError("git_pf.integrations.openai_agents needs the OpenAI Agents SDK: pip install 'git-pf[openai-agents]'") from e

AGENT = img.Agent("openai-agents")


def _jsonable(item):
    """An SDK item (a pydantic model, a dict, anything else) as plain JSON data."""
    if hasattr(item, "model_dump"):
        return item.model_dump(mode="json", exclude_none=True)
    if isinstance(item, dict):
        return {str(k): _jsonable(v) for k, v in item.items()}
    if isinstance(item, (list, tuple)):
        return [_jsonable(v) for v in item]
    if item is None or isinstance(item, (str, int, float, bool)):
        return item
    return str(item)


def _arguments(text):
    """A tool call's arguments: the JSON object the model sent, else its text."""
    if not isinstance(text, str):
        return _jsonable(text)
    try:
        return json.loads(text)
    except ValueError:
        return text


def _check_classes(side_effects: dict[str, str], default: str) -> None:
    for name, cls in [*side_effects.items(), ("default_side_effect", default)]:
        if cls not in effects_mod.CLASSES:
            raise UsageError(f"side effect of '{name}' must be one of {'|'.join(effects_mod.CLASSES)}, not {cls!r}")


def in_recorded_run() -> bool:
    """True under ``git pf record``, ``replay`` or ``run`` (the run's channel is in the environment)."""
    return tools_mod._run() is not None


def pf_tools(agent, side_effects: dict[str, str] | None = None, default_side_effect: str = "irreversible"):
    """Route each ``FunctionTool`` of ``agent`` through ``git_pf.tool`` with its class (``side_effects``
    by tool name, else ``default_side_effect``), keyed by the model's call id; outside a recorded run a
    call runs as before. Idempotent; returns the agent."""
    side_effects = dict(side_effects or {})
    _check_classes(side_effects, default_side_effect)
    for tool in getattr(agent, "tools", None) or ():
        if isinstance(tool, FunctionTool) and not getattr(tool.on_invoke_tool, "_pf_routed", False):
            tool.on_invoke_tool = _routed(tool.name, side_effects.get(tool.name, default_side_effect),
                                          tool.on_invoke_tool)
    return agent


def _routed(name: str, side_effect: str, invoke):
    async def on_invoke_tool(ctx, input_json):
        if not in_recorded_run():
            return await invoke(ctx, input_json)
        key = getattr(ctx, "tool_call_id", None) or None

        @tools_mod.tool(name, side_effect=side_effect, key=key)
        async def call(arguments):
            return await invoke(ctx, input_json)

        return await call(_arguments(input_json))

    on_invoke_tool._pf_routed = True
    return on_invoke_tool


class PfRunHooks(RunHooks):
    """Snapshots an agent run into ``repo`` (a ``git_pf.Repo`` or a path in one); under a recorded run
    (git pf record, replay, run) it only routes the agent's tools through the run's ledger."""

    def __init__(self, repo, fs_root: str | os.PathLike | None = None, *, branch: str | None = None,
                 side_effects: dict[str, str] | None = None, default_side_effect: str = "irreversible",
                 no_redact: frozenset[str] = frozenset(), route_tools: bool = True):
        from ..repo import Repo

        self.side_effects = dict(side_effects or {})
        _check_classes(self.side_effects, default_side_effect)
        self.default_side_effect = default_side_effect
        self.route_tools = route_tools
        self.recorded = in_recorded_run()  # the recorded run is the record: no draw, no image here
        self.images: list[str] = []  # the ids written, in order
        self.messages: list[dict] = []
        self.instructions: str | None = None
        if self.recorded:
            self.repo, self.fs_root, self.branch, self.ledger, self.step = None, None, branch, [], -1
            return
        self.repo = repo if isinstance(repo, Repo) else Repo.open(repo)
        self.fs_root = Path(fs_root) if fs_root is not None else None
        self.branch = refs.check_name(branch or f"oa/{uuid.uuid4().hex[:12]}")
        self.keep = frozenset(no_redact)
        tip = refs.branch_tip(self.repo.git, self.branch)
        parent = img.read_image(self.repo.git, tip) if tip else None
        data = img.read_file(self.repo.git, parent.tree, img.EFFECTS_LEDGER) if parent else None
        self.ledger: list[dict] = effects_mod.decode(data) if data else []  # a named branch goes on
        step = step_of(parent) if parent else None
        self.step = -1 if step is None else step  # the last step written; the first image is step 0
        self._lock = threading.Lock()

    # -- the SDK's callbacks ------------------------------------------------
    async def on_agent_start(self, context, agent) -> None:
        if self.route_tools:
            pf_tools(agent, self.side_effects, self.default_side_effect)
        if not self.recorded:
            await self._snapshot(f"agent start: {agent.name}")  # step 0: the sandbox before the agent acts

    async def on_llm_start(self, context, agent, system_prompt, input_items) -> None:
        if self.recorded:
            return
        system = [{"role": "system", "content": secrets.redact_text(system_prompt, self.keep)}] if system_prompt else []
        self.messages = system + [secrets.redact_json(_jsonable(i), self.keep) for i in input_items]

    async def on_llm_end(self, context, agent, response) -> None:
        if self.recorded:
            return
        self.messages = self.messages + [secrets.redact_json(_jsonable(i), self.keep) for i in response.output]
        await self._snapshot(f"turn: {agent.name} replied")

    async def on_tool_end(self, context, agent, tool, result) -> None:
        if self.recorded:
            return
        name = getattr(context, "tool_name", None) or getattr(tool, "name", type(tool).__name__)
        call_id = getattr(context, "tool_call_id", None) or f"{self.branch}/tool-{len(self.ledger) + 1}"
        args = _arguments(getattr(context, "tool_arguments", None))
        cls = self.side_effects.get(name, self.default_side_effect)
        with self._lock:
            self.ledger = self.ledger + [tool_effect(name, args, _jsonable(result), call_id, cls, self.step + 1, self.keep)]
        await self._snapshot(f"tool: {name}")

    async def on_agent_end(self, context, agent, output) -> None:
        if not self.recorded:
            await self._snapshot(f"agent end: {agent.name}")

    # -- images -------------------------------------------------------------
    async def _snapshot(self, subject: str) -> None:
        await asyncio.to_thread(self._write, subject)

    def _write(self, subject: str) -> None:
        with self._lock:
            git = self.repo.git
            tip = refs.branch_tip(git, self.branch)
            parent = img.read_image(git, tip) if tip else None
            if self.fs_root is not None:
                world = DirWorld(self.repo, self.fs_root, ())
            else:
                world = Given(inherited(self.repo, parent), self.branch)
            step = self.step + 1
            req = SnapshotRequest(self.fs_root or Path("."), branch=self.branch, agent=AGENT,
                                  messages=list(self.messages), effects=list(self.ledger), message=subject,
                                  world=world, parent=tip, trailers=((STEP_TRAILER, str(step)),))
            result = take(self.repo, req)
            if not result.unchanged:
                self.step = step
                self.images.append(result.image.id)
