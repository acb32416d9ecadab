"""OpenAI Agents SDK: a real ``Runner.run`` with ``PfRunHooks`` and a scripted model (the SDK's
``Model`` interface returning scripted responses: two function tool calls, then a final text;
no network, tracing off). The images, the effects ledger and the world are what the run did."""
from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

agents = pytest.importorskip("agents")
from agents import Agent, ModelResponse, Runner, Usage, function_tool, set_tracing_disabled  # noqa: E402
from agents.models.interface import Model  # noqa: E402
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText  # noqa: E402

from git_pf.image import manifest as img, refs  # noqa: E402
from git_pf.integrations.openai_agents import PfRunHooks  # noqa: E402
from git_pf.layers.effects import ledger  # noqa: E402
from git_pf.layers.world.restore import iter_world  # noqa: E402

SECRET = "sk-" + "Z9y8X7w6" * 5


def _call(call_id: str, name: str, args: dict) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(type="function_call", call_id=call_id, name=name, arguments=json.dumps(args),
                                    id=f"fc_{call_id}", status="completed")


def _text(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(type="message", id="msg_final", role="assistant", status="completed",
                                 content=[ResponseOutputText(type="output_text", text=text, annotations=[])])


class ScriptedModel(Model):
    """Answers each request with the next scripted output, and keeps the inputs it was sent."""

    def __init__(self, outputs: list[list]):
        self.outputs, self.inputs = list(outputs), []

    async def get_response(self, system_instructions, input, model_settings, tools, output_schema, handoffs,
                           tracing, *, previous_response_id=None, conversation_id=None, prompt=None):
        self.inputs.append(input)
        return ModelResponse(output=self.outputs.pop(0), usage=Usage(), response_id=None)

    def stream_response(self, *args, **kwargs):
        raise NotImplementedError("the test runs without streaming")


def _world(repo, rev: str) -> dict[str, bytes]:
    tree = img.subtree(repo.git, repo.resolve(rev).tree, img.WORLD_FS)
    if tree is None:
        return {}
    return {rel.decode(): repo.git[oid.hex()].data for rel, _, oid in iter_world(repo.git, bytes.fromhex(tree))}


def test_a_run_with_pf_run_hooks_leaves_its_images_effects_and_world(repo, tmp_path):
    set_tracing_disabled(True)
    sandbox = tmp_path / "sandbox"
    sandbox.mkdir()
    (sandbox / "README").write_text("start\n")
    sent = []

    @function_tool
    def write_note(name: str, text: str) -> str:
        """Write a note into the sandbox."""
        (sandbox / name).write_text(text)
        return f"wrote {len(text)} bytes"

    @function_tool
    def send_email(to: str, body: str) -> str:
        """Send an email."""
        sent.append((to, body))
        return "queued"

    model = ScriptedModel([
        [_call("call_1", "write_note", {"name": "todo.txt", "text": "buy milk\n"})],
        [_call("call_2", "send_email", {"to": "a@example.com", "body": f"key {SECRET}"})],
        [_text("All done.")],
    ])
    agent = Agent(name="helper", instructions="Help.", tools=[write_note, send_email], model=model)
    hooks = PfRunHooks(repo, fs_root=sandbox, branch="oa/run-1", side_effects={"write_note": "idempotent"})
    result = asyncio.run(Runner.run(agent, "note milk, then email me", hooks=hooks))

    assert result.final_output == "All done." and sent == [("a@example.com", f"key {SECRET}")]
    log = repo.log("oa/run-1")
    assert [i.id for i in reversed(log)] == hooks.images
    assert [(i.trailer("Pf-Step")[0], i.subject) for i in reversed(log)] == [
        ("0", "agent start: helper"), ("1", "turn: helper replied"), ("2", "tool: write_note"),
        ("3", "turn: helper replied"), ("4", "tool: send_email"), ("5", "turn: helper replied")]
    assert _world(repo, "oa/run-1~5") == {"README": b"start\n"}
    assert _world(repo, "oa/run-1~3") == {"README": b"start\n", "todo.txt": b"buy milk\n"}
    effects = ledger.decode(repo.read_layer("oa/run-1", "effects/ledger.jsonl"))
    assert ledger.verify(effects) == []
    assert [(e["tool"], e["idempotency_key"], e["side_effect_class"]) for e in effects] == [
        ("write_note", "call_1", "idempotent"), ("send_email", "call_2", "irreversible")]
    assert effects[0]["args"] == {"name": "todo.txt", "text": "buy milk\n"} and effects[0]["result"] == "wrote 9 bytes"
    assert SECRET not in json.dumps(effects) and effects[1]["args"]["to"] == "a@example.com"
    assert len(ledger.decode(repo.read_layer("oa/run-1~2", "effects/ledger.jsonl"))) == 1
    messages = [json.loads(l) for l in repo.read_layer("oa/run-1", "trace/messages.jsonl").splitlines()]
    assert messages[0] == {"role": "system", "content": "Help."}  # the instructions reach the trace
    assert messages[1] == {"role": "user", "content": "note milk, then email me"}
    kinds = [m.get("type") for m in messages[2:]]
    assert kinds == ["function_call", "function_call_output", "function_call", "function_call_output", "message"]
    assert messages[-1]["content"][0]["text"] == "All done." and SECRET not in json.dumps(messages)
    assert repo.resolve("oa/run-1").manifest["agent"]["kind"] == "openai-agents"


def test_a_run_without_a_sandbox_and_a_bad_side_effect_class(repo, run_pf):
    set_tracing_disabled(True)

    @function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return q.upper()

    model = ScriptedModel([[_call("c1", "lookup", {"q": "x"})], [_text("X")]])
    hooks = PfRunHooks(repo, side_effects={"lookup": "pure"})
    asyncio.run(Runner.run(Agent(name="a", tools=[lookup], model=model), "look up x", hooks=hooks))
    assert hooks.branch.startswith("oa/") and len(hooks.images) == 4  # start, turn, tool, turn
    assert _world(repo, hooks.branch) == {}
    effects = ledger.decode(repo.read_layer(hooks.branch, "effects/ledger.jsonl"))
    assert [(e["tool"], e["side_effect_class"], e["result"]) for e in effects] == [("lookup", "pure", "X")]
    with pytest.raises(Exception, match="must be one of"):
        PfRunHooks(repo, side_effects={"lookup": "harmless"})
    reply = repo.git_dir.parent / "reply.json"
    reply.write_text('{"output_text": "Y"}')
    out = run_pf("fork", hooks.branch, "--at-step", "2", "--response", reply, cwd=repo.git_dir.parent, check=False)
    assert out.returncode == 2 and "not a recorded run" in out.stderr and out.stderr.count("\n") == 1


# -- under git pf record / replay ----------------------------------------------------------------------
AGENT_SCRIPT = """
import asyncio, sys
from pathlib import Path
from agents import Agent, Runner, function_tool, set_tracing_disabled
from git_pf.integrations.openai_agents import PfRunHooks

set_tracing_disabled(True)
sandbox = Path(sys.argv[1])

@function_tool
def append_note(text: str) -> str:
    \"\"\"Append a line to notes.txt.\"\"\"
    with open(sandbox / "notes.txt", "a") as f:
        f.write(text + "\\n")
    return "appended"

@function_tool
def read_notes() -> str:
    \"\"\"Read notes.txt.\"\"\"
    return (sandbox / "notes.txt").read_text()

async def main():
    agent = Agent(name="notes", instructions="Keep notes.", tools=[append_note, read_notes], model="gpt-4.1")
    hooks = PfRunHooks(sys.argv[2], fs_root=sandbox, side_effects={"read_notes": "pure"})
    if sys.argv[3] == "stream":
        result = Runner.run_streamed(agent, "note alpha, then read", hooks=hooks)
        async for _ in result.stream_events():
            pass
    else:
        result = await Runner.run(agent, "note alpha, then read", hooks=hooks)
    print("agent:", result.final_output, hooks.branch, len(hooks.images))

asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["json", "stream"])
def test_a_recorded_agent_with_pf_run_hooks_replays_bit_exact_with_its_tools_on_the_ledger(repo, run_pf, tmp_path,
                                                                                            mode):
    from git_pf.testing.fakellm import FakeLLM

    root = repo.git_dir.parent
    script = tmp_path / "agent.py"
    script.write_text(AGENT_SCRIPT)
    replies = [{"tool": "append_note", "args": {"text": "alpha"}}, {"tool": "read_notes", "args": {}}, "Noted alpha."]
    env = {"OPENAI_API_KEY": "sk-test-none", "OPENAI_AGENTS_DISABLE_TRACING": "1"}
    with FakeLLM({"openai.responses": replies}) as fake:
        sandbox = tmp_path / "sb"
        sandbox.mkdir()
        rec = run_pf("record", "--name", "oa-rec", "--fs-root", sandbox, "--upstream", fake.url, "--json", "--",
                     sys.executable, script, sandbox, root, mode, cwd=root, env=env)
        assert "agent: Noted alpha. None 0" in rec.stdout  # no branch of its own, no image: the run is the record
        asked = len(fake.requests)
        world = tmp_path / "again"
        world.mkdir()
        played = run_pf("replay", "oa-rec", "--fs-root", world, "--json", "--", sys.executable, script, world, root,
                        mode, cwd=root, env=env, check=False)
        assert len(fake.requests) == asked  # nothing reached the server
    assert played.returncode == 0, played.stderr + played.stdout
    out = json.loads(played.stdout[played.stdout.index("\n{") + 1:])
    assert out["bit_exact"] is True and out["mismatch"] is None
    assert out["effects"] == {"replayed": 2, "of": 2}
    assert refs.list_refs(repo.git, refs.HEADS + "oa/") == {}  # no branch of the hooks' own, recorded or replayed
    effects = ledger.decode(repo.read_layer("oa-rec", "effects/ledger.jsonl"))
    assert [(e["tool"], e["side_effect_class"]) for e in effects] == [("append_note", "irreversible"),
                                                                       ("read_notes", "pure")]
    assert (world / "notes.txt").read_text() == "alpha\n"  # answered from the ledger, its world change applied
