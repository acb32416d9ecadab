"""Claude Code hooks: hook events and transcripts shaped as the real CLI (2.1.332) sends and writes them
(the tool result's line lands after PostToolUse), fed to the real ``git pf hook claude-code`` (through
``sh -c``, as Claude Code runs a hook) on a real project directory; the settings file install and
uninstall; ``git pf rewind``; and the real CLI itself (from npm, pinned: ``make claude-code``) against a
scripted Anthropic server (tests/claude_cli_helpers.py)."""
from __future__ import annotations

import json
import os
import pty
import re
import shlex
import signal
import subprocess
import time
from pathlib import Path

import pytest

from git_pf import Repo
from git_pf.image import manifest as img
from git_pf.layers.effects import ledger
from git_pf.integrations.claude_code.hook import server_socket, sync
from git_pf.layers.world.restore import iter_world

import claude_cli_helpers as cli
from runs_helpers import report
from conftest import BIN, git_fsck_clean

SID = "3f2a9c1e-7b4d-4e2a-9f10-5c6d7e8f9a0b"
SECRET = "sk-" + "A1b2C3d4" * 5


class Claude:
    """A Claude Code session against one project: writes its transcript, fires its hook events."""

    def __init__(self, project: Path, transcript: Path, env: dict, sid: str = SID):
        self.project, self.transcript, self.env, self.sid = project, transcript, env, sid
        self.n = 0

    def line(self, **entry) -> None:
        entry = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": str(self.project),
                 "sessionId": self.sid, "version": "2.1.332", "uuid": f"u{self.n}",
                 "timestamp": "2026-01-05T10:00:00.000Z", **entry}
        self.n += 1
        with open(self.transcript, "a") as f:
            f.write(json.dumps(entry) + "\n")

    def payload(self, event: str, **more) -> dict:
        common = {"session_id": self.sid, "transcript_path": str(self.transcript), "cwd": str(self.project)}
        if event != "SessionStart":
            common.update(prompt_id="7bfcea86-7465-4a5a-a08e-f5bc52a3af26", permission_mode="bypassPermissions")
        if event.startswith(("PreToolUse", "PostToolUse", "Stop")):
            common["effort"] = {"level": "medium"}
        return {**common, "hook_event_name": event, **more}

    def run(self, command: str, payload: dict | bytes, check_stderr: bool = True) -> subprocess.CompletedProcess:
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        proc = subprocess.run(["sh", "-c", command], input=data, cwd=self.project, env=self.env, capture_output=True)
        if check_stderr:
            assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        return proc

    def hook(self, event: str, check_stderr: bool = True, **more) -> subprocess.CompletedProcess:
        return self.run("git pf hook claude-code", self.payload(event, **more), check_stderr)

    def tool(self, name: str, tool_input: dict, response, error: str | None = None, **more) -> subprocess.CompletedProcess:
        """The assistant's tool_use in the transcript, then PostToolUse (the tool has already acted), or
        PostToolUseFailure with ``error``; the tool result's line after the hook, as the real CLI writes it."""
        use_id = f"toolu_{self.n:04d}"
        self.line(type="assistant", requestId=f"req_{self.n}", message={
            "id": f"msg_{self.n:04d}", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "tool_use", "id": use_id, "name": name, "input": tool_input}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5}})
        if error is None:
            out = self.hook("PostToolUse", tool_name=name, tool_input=tool_input, tool_response=response,
                            tool_use_id=use_id, duration_ms=9, **more)
        else:
            out = self.hook("PostToolUseFailure", tool_name=name, tool_input=tool_input, tool_use_id=use_id,
                            error=error, is_interrupt=False, duration_ms=454, **more)
        self.line(type="user", message={"role": "user", "content": [
            {"tool_use_id": use_id, "type": "tool_result", "content": error or json.dumps(response),
             **({"is_error": True} if error else {})}]}, toolUseResult=response if error is None else f"Error: {error}")
        return out


@pytest.fixture
def project(tmp_path):
    """A project that is a git work tree made ready for git-pf, with the hook server off."""
    root = tmp_path / "project"
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / "app.py").write_text("print('v1')\n")
    (root / "notes.md").write_text("notes\n")
    (root / ".gitignore").write_text("build/\n")
    (root / "build").mkdir()
    (root / "build" / "cache.bin").write_bytes(b"ignored")
    env = dict(os.environ, PATH=f"{BIN}:{os.environ.get('PATH', '')}", CLAUDE_PROJECT_DIR=str(root),
               HOME=str(tmp_path / "home"), GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@t")
    env.pop("GIT_PF_REPO", None)
    subprocess.run(["git", "pf", "init"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "config", "pf.claudeCode.server", "false"], cwd=root, check=True)
    yield root, env
    pid_file = root / ".git" / "pf" / "claude-code" / "server.pid"
    if pid_file.exists():  # a server a test started and did not stop: end it, by its id
        try:
            os.kill(int(pid_file.read_text()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass
    git_fsck_clean(root)


@pytest.fixture
def claude(project, tmp_path):
    root, env = project
    return Claude(root, tmp_path / "transcript.jsonl", env)


def _world(repo: Repo, rev: str) -> dict[str, bytes]:
    """The image's project files by path."""
    tree = img.subtree(repo.git, repo.resolve(rev).tree, img.WORLD_FS)
    return {os.fsdecode(rel): repo.git[oid.hex()].data for rel, _, oid in iter_world(repo.git, bytes.fromhex(tree))}


def _ledger(repo: Repo, rev: str) -> list[dict]:
    return ledger.decode(repo.read_layer(rev, "effects/ledger.jsonl") or b"")


def _messages(repo: Repo, rev: str) -> list[dict]:
    return [json.loads(l) for l in (repo.read_layer(rev, "trace/messages.jsonl") or b"").splitlines()]


def _session(claude: Claude) -> None:
    """Start, a Write, an Edit, a Read, a Bash that removes one file and makes another, Stop."""
    p = claude.project
    claude.hook("SessionStart", source="startup")
    claude.hook("UserPromptSubmit", prompt="add a helper and clean up")
    claude.line(type="user", message={"role": "user", "content": "add a helper and clean up"})
    (p / "helper.py").write_text("def help(): pass\n")
    claude.tool("Write", {"file_path": str(p / "helper.py"), "content": "def help(): pass\n"},
                {"type": "create", "filePath": str(p / "helper.py")})
    (p / "app.py").write_text("print('v2')\n")
    claude.tool("Edit", {"file_path": str(p / "app.py"), "old_string": "v1", "new_string": "v2"},
                {"filePath": str(p / "app.py"), "oldString": "v1", "newString": "v2"})
    claude.tool("Read", {"file_path": str(p / "app.py")}, {"type": "text", "file": {"content": "print('v2')\n"}})
    (p / "notes.md").unlink()
    (p / "out.txt").write_text("generated\n")
    claude.tool("Bash", {"command": f"rm notes.md && ./gen > out.txt  # OPENAI_API_KEY={SECRET}"},
                {"stdout": "", "stderr": "", "interrupted": False, "isImage": False})
    claude.line(type="assistant", message={"id": "msg_final", "role": "assistant",
                                           "content": [{"type": "text", "text": "Done."}]})
    claude.hook("Stop", stop_hook_active=False, last_assistant_message="Done.", background_tasks=[],
                session_crons=[])


@pytest.mark.parametrize("server", [False, True], ids=["in-process", "server"])
def test_a_session_is_a_branch_of_step_images(claude, server):
    if server:
        subprocess.run(["git", "config", "pf.claudeCode.server", "true"], cwd=claude.project, check=True)
    _session(claude)
    sync(str(claude.project / ".git"))  # the server answers once a step's world is captured, and writes after
    repo = Repo.open(claude.project)
    branch = f"cc/{SID}"
    log = repo.log(branch)
    assert [i.trailer("Pf-Step") for i in log] == [["4"], ["4"], ["3"], ["2"], ["1"], ["0"]]
    assert log[0].trailer("Pf-Run-Exit") == ["0"] and [i.trailer("Pf-Claude-Turn") for i in log] == [["1"]] * 5 + [["0"]]
    assert _world(repo, f"{branch}~5") == {".gitignore": b"build/\n", "app.py": b"print('v1')\n", "notes.md": b"notes\n"}
    assert _world(repo, f"{branch}~4")["helper.py"] == b"def help(): pass\n"
    assert _world(repo, f"{branch}~3")["app.py"] == b"print('v2')\n"
    last = _world(repo, branch)
    assert "notes.md" not in last and last["out.txt"] == b"generated\n" and "build/cache.bin" not in last
    effects = _ledger(repo, branch)
    assert [(e["tool"], e["side_effect_class"]) for e in effects] == [
        ("Write", "idempotent"), ("Edit", "idempotent"), ("Read", "pure"), ("Bash", "irreversible")]
    assert effects[0]["idempotency_key"] == "toolu_0001" and effects[0]["args"]["content"] == "def help(): pass\n"
    assert SECRET not in json.dumps(effects) and "rm notes.md" in effects[3]["args"]["command"]
    assert ledger.verify(effects) == [] and len(_ledger(repo, f"{branch}~2")) == 3
    for back, (n, tool) in zip((4, 3, 2, 1), enumerate(("Write", "Edit", "Read", "Bash"), 1)):
        step = _messages(repo, f"{branch}~{back}")  # each step's trace ends with its own call and result
        assert [m["role"] for m in step] == ["user"] + ["assistant", "user"] * n
        assert step[-2]["content"][0]["name"] == tool and step[-1]["content"][0]["type"] == "tool_result"
    messages = _messages(repo, branch)
    assert messages[0] == {"role": "user", "content": "add a helper and clean up"}
    assert [m["role"] for m in messages] == ["user"] + ["assistant", "user"] * 4 + ["assistant"]
    assert messages[-3]["content"][0]["name"] == "Bash" and SECRET not in json.dumps(messages)
    assert messages[-1]["content"][0]["text"] == "Done."
    tag = repo.git.references.get(f"refs/pf/tags/{branch}/turn-1")
    assert tag is not None and str(tag.target) == log[0].id
    claude.hook("Stop", stop_hook_active=False, last_assistant_message="Done.")  # nothing new: no new image
    claude.hook("SessionEnd", reason="other")
    sync(str(claude.project / ".git"))
    assert repo.log(branch)[0].id == log[0].id and repo.git.references.get(f"refs/pf/tags/{branch}/turn-2") is None
    if server:
        pid = int((claude.project / ".git/pf/claude-code/server.pid").read_text())
        sock = server_socket(str(claude.project / ".git"))
        assert os.path.exists(sock) and not any(p.is_socket() for p in claude.project.rglob("*"))
        out = subprocess.run(["git", "pf", "hook", "claude-code", "--stop-server"], cwd=claude.project,
                             env=claude.env, capture_output=True, text=True)
        assert out.stdout.strip() == "stopped the hook server"
        _wait_gone(pid)
        assert not os.path.exists(sock)


def _wait_gone(pid: int) -> None:
    for _ in range(2000):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.01)
    raise AssertionError(f"the hook server {pid} did not end")


def test_an_assistant_message_split_over_lines_is_one_and_side_chains_stay_out(claude):
    claude.line(type="summary", summary="earlier work", leafUuid="x")
    claude.line(type="assistant", message={"id": "msg_a", "role": "assistant", "content": [{"type": "text", "text": "Let me look."}]})
    claude.line(type="assistant", isSidechain=True, message={"id": "msg_s", "role": "assistant", "content": "sub-agent"})
    claude.hook("SessionStart", source="startup")
    claude.tool("Glob", {"pattern": "*.py"}, {"filenames": ["app.py"]})
    messages = _messages(Repo.open(claude.project), f"cc/{SID}")
    assert messages[0]["content"] == [{"type": "text", "text": "Let me look."}]
    assert len(messages) == 3 and "sub-agent" not in json.dumps(messages)


def test_pf_config_sets_a_tools_side_effect_class(claude):
    subprocess.run(["git", "config", "pf.claudeCode.Bash.sideEffect", "idempotent"], cwd=claude.project, check=True)
    subprocess.run(["git", "config", "pf.claudeCode.mcp__db__query.sideEffect", "pure"], cwd=claude.project, check=True)
    claude.tool("Bash", {"command": "make"}, {"stdout": "ok"})
    claude.tool("mcp__db__query", {"sql": "select 1"}, [{"type": "text", "text": "1"}])
    claude.tool("mcp__mail__send", {"to": "a@b"}, "sent")
    classes = [e["side_effect_class"] for e in _ledger(Repo.open(claude.project), f"cc/{SID}")]
    assert classes == ["idempotent", "pure", "irreversible"]


def test_a_failure_is_logged_and_never_blocks_the_tool_call(claude, tmp_path):
    log = claude.project / ".git/pf/claude-code/hook.log"
    claude.hook("SessionStart", source="startup")
    subprocess.run(["git", "config", "pf.claudeCode.Bash.sideEffect", "sometimes"], cwd=claude.project, check=True)
    out = claude.tool("Bash", {"command": "make"}, {"stdout": "ok"}, check_stderr=False)
    assert out.returncode == 0 and len(out.stderr.splitlines()) == 1 and b"sideEffect" in out.stderr
    assert "sideEffect must be one of" in log.read_text()
    assert len(Repo.open(claude.project).log(f"cc/{SID}")) == 1  # nothing half-written: no step image
    for bad in (b"{not json", json.dumps({**claude.payload("PostToolUse"), "session_id": "../../x"}).encode()):
        out = claude.run("git pf hook claude-code", bad, check_stderr=False)
        assert out.returncode == 0 and len(out.stderr.splitlines()) == 1 and b"Traceback" not in out.stderr
    assert len(log.read_text().splitlines()) == 3
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    out = subprocess.run(["sh", "-c", "git pf hook claude-code"], input=json.dumps(claude.payload("Stop")).encode(),
                         cwd=elsewhere, env={**claude.env, "CLAUDE_PROJECT_DIR": str(elsewhere)}, capture_output=True)
    assert out.returncode == 0 and b"not a git repository" in out.stderr and len(out.stderr.splitlines()) == 1


def test_the_installed_hook_command_loads_no_site_and_no_git_pf_machinery_on_the_warm_path(claude):
    """The command install writes starts Python without ``site`` (nor json and re) and hands the event to
    the warm hook server; ``-X importtime`` shows what that process imported. Stop is answered once its
    world is captured and SessionEnd before the server does anything; their images still come, in order,
    each with the world of its event. Without the server the client loads what it needs."""
    from git_pf.integrations.claude_code.settings import hook_command

    subprocess.run(["git", "config", "pf.claudeCode.server", "true"], cwd=claude.project, check=True)
    claude.hook("SessionStart", source="startup")  # starts the server
    env = dict(claude.env, PYTHONPROFILEIMPORTTIME="1")
    out = Claude(claude.project, claude.transcript, env).run(hook_command(), claude.payload(
        "Stop", stop_hook_active=False, last_assistant_message="Done."), check_stderr=False)
    imported = {line.split("|")[-1].strip() for line in out.stderr.decode().splitlines() if line.startswith("import time:")}
    assert "git_pf.integrations.claude_code.hook" in imported, out.stderr[-2000:]
    assert not imported & {"site", "pygit2", "typer", "git_pf.repo", "git_pf.integrations.claude_code.session", "subprocess",
                           "json", "re"}
    repo = Repo.open(claude.project)
    (claude.project / "late.txt").write_text("late\n")  # after Stop was answered: not in its world
    assert claude.run(hook_command(), claude.payload("SessionEnd", reason="other")).stdout == b""
    claude.run("git pf hook claude-code --stop-server", b"")  # answered after the queued events were handled
    stop, end = repo.log(f"cc/{SID}")[1::-1]
    assert len(repo.log(f"cc/{SID}")) == 3 and "late.txt" in _world(repo, end.id) and "late.txt" not in _world(repo, stop.id)
    assert _messages(repo, stop.id)[-1]["content"] == [{"type": "text", "text": "Done."}]
    subprocess.run(["git", "config", "pf.claudeCode.server", "false"], cwd=claude.project, check=True)
    (claude.project / "later.txt").write_text("later\n")
    out = claude.run(hook_command(), claude.payload("Stop", last_assistant_message="Done."))  # handled in-process
    assert out.returncode == 0 and len(repo.log(f"cc/{SID}")) == 4


def test_a_repository_whose_hook_server_runs_copies_and_the_copy_gets_its_own_server(claude, tmp_path):
    """The hook server's socket lives in the user's private runtime directory, not in the repository."""
    import shutil

    subprocess.run(["git", "config", "pf.claudeCode.server", "true"], cwd=claude.project, check=True)
    claude.hook("SessionStart", source="startup")  # starts the server
    sync(str(claude.project / ".git"))
    copy = tmp_path / "copy"
    shutil.copytree(claude.project, copy, symlinks=True)  # raised on the socket when it was in .git
    other = Claude(copy, tmp_path / "copy.jsonl", dict(claude.env, CLAUDE_PROJECT_DIR=str(copy)), sid="copied-session")
    try:
        other.hook("SessionStart", source="startup")
        sync(str(copy / ".git"))
        assert Repo.open(copy).resolve("cc/copied-session") and not Repo.open(claude.project).git.references.get(
            "refs/pf/heads/cc/copied-session")
        assert (copy / ".git/pf/claude-code/server.pid").read_text() != (
            claude.project / ".git/pf/claude-code/server.pid").read_text()  # its own server wrote it
    finally:
        other.run("git pf hook claude-code --stop-server", b"")


def test_the_hook_finds_the_repository_as_git_does_git_dir_and_a_gitdir_file(claude, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    subprocess.run(["git", "init", "-q", str(elsewhere)], check=True)
    subprocess.run(["git", "pf", "init"], cwd=elsewhere, env=claude.env, check=True, capture_output=True)
    subprocess.run(["git", "config", "pf.claudeCode.server", "false"], cwd=elsewhere, check=True)
    Claude(claude.project, claude.transcript, dict(claude.env, GIT_DIR=str(elsewhere / ".git"))).hook(
        "SessionStart", source="startup")
    sessions = lambda where: subprocess.run(["git", "for-each-ref", "--format=%(refname)", "refs/pf/heads/cc/"],
                                            cwd=where, capture_output=True, text=True).stdout.split()
    assert sessions(elsewhere) == [f"refs/pf/heads/cc/{SID}"] and sessions(claude.project) == []
    separate, store = tmp_path / "separate", tmp_path / "separate.git"
    subprocess.run(["git", "init", "-q", str(separate)], check=True)
    subprocess.run(["git", "pf", "init"], cwd=separate, env=claude.env, check=True, capture_output=True)
    subprocess.run(["git", "config", "pf.claudeCode.server", "false"], cwd=separate, check=True)
    (separate / ".git").rename(store)  # as 'git init --separate-git-dir' leaves it
    (separate / ".git").write_text(f"gitdir: {store}\n")
    subprocess.run(["git", "config", "core.worktree", str(separate)], cwd=separate, check=True)
    Claude(separate, claude.transcript, dict(claude.env, CLAUDE_PROJECT_DIR=str(separate)), sid="separate").hook(
        "SessionStart", source="startup")  # a gitdir: file names the git directory
    assert sessions(separate) == ["refs/pf/heads/cc/separate"] and (store / "pf/claude-code/sessions").is_dir()


# -- install / uninstall --------------------------------------------------------------------------
USER_SETTINGS = {
    "permissions": {"allow": ["Bash(npm run test:*)"]},
    "hooks": {"PostToolUse": [{"matcher": "Write|Edit", "hooks": [
        {"type": "command", "command": "cat > \"$CLAUDE_PROJECT_DIR/.marker\""}]}]},
}


def _matches(matcher, tool: str | None) -> bool:
    return tool is None or matcher in (None, "", "*") or re.fullmatch(matcher, tool) is not None


def fire(claude: Claude, event: str, tool: str | None = None, **more) -> list[str]:
    """Run every hook command the settings file gives ``event`` as Claude Code does: through
    ``sh -c``, the event JSON on stdin; the commands run."""
    settings = json.loads((claude.project / ".claude/settings.json").read_text())
    ran = []
    for group in settings.get("hooks", {}).get(event, []):
        if _matches(group.get("matcher"), tool):
            for h in group["hooks"]:
                claude.run(h["command"], claude.payload(event, **more))
                ran.append(h["command"])
    return ran


def test_install_chains_the_users_hooks_and_uninstall_gives_the_file_back(claude):
    settings = claude.project / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = (json.dumps(USER_SETTINGS, indent=4) + "\n").encode()
    settings.write_bytes(original)
    pf = ["git", "pf", "install", "--claude-code"]
    out = subprocess.run(pf, cwd=claude.project, env=claude.env, capture_output=True, text=True, check=True)
    assert "SessionStart, UserPromptSubmit, PreToolUse, PostToolUse, PostToolUseFailure, Stop, SessionEnd" in out.stdout
    installed = settings.read_bytes()
    assert subprocess.run(pf, cwd=claude.project, env=claude.env, capture_output=True, check=True).returncode == 0
    assert settings.read_bytes() == installed  # idempotent
    assert json.loads(installed)["permissions"] == USER_SETTINGS["permissions"]

    fire(claude, "SessionStart", source="startup")
    (claude.project / "new.py").write_text("x = 1\n")
    ran = fire(claude, "PostToolUse", "Write", tool_name="Write", tool_input={"file_path": "new.py", "content": "x = 1\n"},
               tool_response={"type": "create"}, tool_use_id="toolu_1")
    assert len(ran) == 2 and json.loads((claude.project / ".marker").read_text())["tool_name"] == "Write"
    fire(claude, "Stop", last_assistant_message="Wrote new.py.")
    repo = Repo.open(claude.project)
    assert _world(repo, f"cc/{SID}")["new.py"] == b"x = 1\n"
    assert repo.git.references.get(f"refs/pf/tags/cc/{SID}/turn-1") is not None

    subprocess.run(["git", "pf", "uninstall", "--claude-code"], cwd=claude.project, env=claude.env, check=True,
                   capture_output=True)
    assert settings.read_bytes() == original


def test_uninstall_after_the_user_edited_the_file_removes_only_git_pfs_entries(claude):
    settings = claude.project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps(USER_SETTINGS))
    subprocess.run(["git", "pf", "install", "--claude-code", "--json"], cwd=claude.project, env=claude.env, check=True,
                   capture_output=True)
    edited = json.loads(settings.read_text())
    edited["model"] = "opus"
    settings.write_text(json.dumps(edited))
    out = subprocess.run(["git", "pf", "uninstall", "--claude-code", "--json"], cwd=claude.project, env=claude.env,
                         check=True, capture_output=True, text=True)
    assert json.loads(out.stdout)["restored"] is False
    assert json.loads(settings.read_text()) == {**USER_SETTINGS, "model": "opus"}


@pytest.mark.parametrize("old", ["claude_code_hook_main.py", "claude_code_hook.py"])
def test_a_hook_command_an_earlier_release_installed_still_works_and_install_replaces_it(claude, old):
    """Earlier releases wrote the hook client's path as ``integrations/<old>``; after an upgrade that
    command still writes the step (a missing file would exit 2, which Claude Code reads as "block"),
    and installing again puts the current command in its place."""
    import git_pf.integrations
    from git_pf.integrations.claude_code.settings import hook_command

    path = Path(git_pf.integrations.__file__).parent / old
    command = f"{shlex.quote(os.sys.executable)} -S {shlex.quote(str(path))} hook claude-code"
    assert claude.run(command, claude.payload("SessionStart", source="startup")).returncode == 0
    assert len(Repo.open(claude.project).log(f"cc/{SID}")) == 1
    settings = claude.project / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": command}]}]}}))
    run = subprocess.run(["git", "pf", "install", "--claude-code"], cwd=claude.project, env=claude.env,
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    commands = [h["command"] for groups in json.loads(settings.read_text())["hooks"].values()
                for group in groups for h in group["hooks"]]
    assert command not in commands and any(hook_command() in c for c in commands)


def test_install_into_no_settings_and_user_scope_and_a_broken_file(claude):
    settings = claude.project / ".claude" / "settings.json"
    run = lambda *a: subprocess.run(["git", "pf", *a], cwd=claude.project, env=claude.env, capture_output=True, text=True)
    assert run("install", "--claude-code").returncode == 0 and settings.exists()
    assert run("uninstall", "--claude-code").returncode == 0
    assert not (claude.project / ".claude").exists()
    user = Path(claude.env["HOME"]) / ".claude" / "settings.json"
    assert run("install", "--claude-code", "--scope", "user").returncode == 0
    assert "claude_code/hook_main.py hook claude-code" in user.read_text() and not settings.exists()
    assert run("uninstall", "--claude-code", "--scope", "user").returncode == 0 and not user.exists()
    claude.env["CLAUDE_CONFIG_DIR"] = str(claude.project.parent / "claude-config")  # where Claude Code reads it
    assert run("install", "--claude-code", "--scope", "user").returncode == 0 and not user.exists()
    assert "hook claude-code" in (claude.project.parent / "claude-config" / "settings.json").read_text()
    assert run("uninstall", "--claude-code", "--scope", "user").returncode == 0
    assert not (claude.project.parent / "claude-config" / "settings.json").exists()
    del claude.env["CLAUDE_CONFIG_DIR"]
    settings.parent.mkdir()
    settings.write_text("{\"hooks\": [")
    out = run("install", "--claude-code")
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "not valid JSON" in out.stderr
    assert settings.read_text() == "{\"hooks\": [" and not list(settings.parent.glob(".*pf-tmp"))
    assert run("install", "--claude-code", "--scope", "team").returncode == 2


# -- rewind -----------------------------------------------------------------------------------------
def test_rewind_restores_the_project_at_a_step_shell_changes_included(claude, tmp_path):
    _session(claude)
    p = claude.project
    (p / "app.py").write_text("print('v3, after the session')\n")
    run = lambda *a: subprocess.run(["git", "pf", "rewind", *a], cwd=p, env=claude.env, capture_output=True, text=True)
    out = run("--to-step", "1")  # not a terminal: refuses, changes nothing
    assert out.returncode == 2 and "--yes" in out.stderr and (p / "out.txt").exists()
    assert b"2 files to write, 1 to remove" in _answer_prompt(claude, b"n\n")  # a terminal: asks; "n" changes nothing
    assert (p / "out.txt").exists() and "v3" in (p / "app.py").read_text()
    out = run(SID, "--to-step", "1", "--yes", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["applied"] and sorted(report["remove"]) == ["out.txt"]
    assert (p / "app.py").read_text() == "print('v1')\n" and (p / "notes.md").read_text() == "notes\n"
    assert (p / "helper.py").exists() and not (p / "out.txt").exists()
    assert (p / "build" / "cache.bin").read_bytes() == b"ignored" and (p / ".git" / "HEAD").exists()
    assert json.loads(run("--to-step", "1", "--json").stdout)["applied"] is False  # already there
    out = run(f"cc/{SID}", "--to-step", "4", "--yes")
    assert out.returncode == 0 and (p / "out.txt").exists() and not (p / "notes.md").exists()
    other = tmp_path / "copy"
    other.mkdir()
    assert run("--to-step", "0", "--into", str(other), "--yes").returncode == 0
    assert sorted(x.name for x in other.iterdir()) == [".gitignore", "app.py", "notes.md"]
    out = run("--to-step", "9", "--yes")
    assert out.returncode == 2 and "no step 9" in out.stderr


def _answer_prompt(claude: Claude, answer: bytes) -> bytes:
    """Run ``git pf rewind --to-step 1`` on a terminal, answer its question; what it showed."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(["git", "pf", "rewind", "--to-step", "1"], cwd=claude.project, env=claude.env,
                            stdin=slave, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    seen = b""
    try:
        while b"Go on?" not in seen:
            seen += os.read(master, 1024)
        os.write(master, answer)
        assert proc.wait(timeout=60) == 1
    finally:
        os.close(master)
    return seen.replace(b"\r", b"")


# -- the real Claude Code CLI -------------------------------------------------------------------------
def _step_images(repo: Repo, branch: str) -> list:
    """The branch's images, oldest first."""
    return list(reversed(repo.log(branch)))


@pytest.mark.skipif(cli.missing() is not None, reason=str(cli.missing()))
def test_the_real_cli_saves_every_call_the_answer_and_rewinds_code_and_conversation(project, tmp_path):
    root, env = project
    subprocess.run(["git", "config", "--unset", "pf.claudeCode.server"], cwd=root, check=True)  # as installed
    settings = root / ".claude" / "settings.json"
    settings.parent.mkdir()
    original = b'{\n  "permissions": {"allow": ["Bash(make:*)"]}\n}\n'
    settings.write_bytes(original)
    pf = lambda *a, **kw: subprocess.run(["git", "pf", *a], cwd=root, env=kw.get("env", env), capture_output=True,
                                         text=True)
    assert pf("install", "--claude-code").returncode == 0
    assert pf("install", "--claude-code", "--check").returncode == 0
    config = tmp_path / "claude-config"
    with cli.ScriptedAnthropic(cli.session(root)) as server:
        cenv = cli.claude_env(env, server.url, config)
        result = cli.run_claude(root, cenv, "make hello.py")
        assert result["result"] == "All done." and not server.unknown(), server.unknown()
        sid = result["session_id"]
        sync(str(root / ".git"))  # the hook server may still be writing the final image
        repo = Repo.open(root)
        branch = f"cc/{sid}"
        images = _step_images(repo, branch)
        # one image per tool call, the failed Bash included, then the final image
        assert [(i.trailer("Pf-Step"), i.trailer("Pf-Run-Exit")) for i in images] == [
            (["0"], []), (["1"], []), (["2"], []), (["3"], []), (["3"], ["0"])]
        effects = _ledger(repo, branch)
        assert [(e["tool"], e.get("failed", False)) for e in effects] == [("Write", False), ("Bash", True), ("Edit", False)]
        assert effects[1]["error"] == "Exit code 3" and effects[1]["side_effect_class"] == "irreversible"
        assert _world(repo, images[2].id)["made.txt"] == b"made\n"  # the failed call changed the project
        for n in (1, 2, 3):  # each step's messages hold its own tool call
            uses = [b["id"] for m in _messages(repo, images[n].id) if isinstance(m["content"], list)
                    for b in m["content"] if b.get("type") == "tool_use"]
            assert uses[-1] == effects[n - 1]["idempotency_key"]
        final = _messages(repo, branch)
        assert final[-1]["role"] == "assistant" and final[-1]["content"][0]["text"] == "All done."
        assert str(repo.git.references.get(f"refs/pf/tags/{branch}/turn-1").target) == images[-1].id

        # install --check catches a hook that names git-pf through a PATH Claude Code lacks
        text = settings.read_text()
        command = json.loads(text)["hooks"]["PostToolUse"][-1]["hooks"][0]["command"]
        settings.write_text(text.replace(command, "git pf hook claude-code"))
        bare = dict(env, PATH="/usr/bin:/bin")
        out = subprocess.run([str(BIN / "git-pf"), "install", "--claude-code", "--check"], cwd=root, env=bare,
                             capture_output=True, text=True)
        assert out.returncode == 1 and "'pf' is not a git command" in out.stdout, out
        settings.write_text(text)  # as installed
        assert pf("uninstall", "--claude-code").returncode == 0 and settings.read_bytes() == original

        # rewind: the project at step 1 (the Bash-made file gone), then at step 2 (back); settings untouched
        assert pf("rewind", sid, "--to-step", "1", "--yes").returncode == 0
        assert (root / "hello.py").read_text() == "print('hi')\n" and not (root / "made.txt").exists()
        assert settings.read_bytes() == original
        assert pf("rewind", "--to-step", "2", "--yes").returncode == 0 and (root / "made.txt").read_text() == "made\n"
        assert pf("rewind", "--to-step", "0", "--yes").returncode == 0 and settings.read_bytes() == original

        # rewind the conversation to step 1: claude --resume goes on from there
        out = pf("rewind", sid, "--to-step", "1", "--scope", "conversation", "--yes")
        assert out.returncode == 0, out.stderr
        before = len(server.served())
        resumed = cli.run_claude(root, cenv, "go on", "--resume", sid)
        assert resumed["session_id"] == sid
        first = [r["json"] for r in server.served()[before:] if r["json"].get("tools")][0]
        sent = [b for m in first["messages"] if m["role"] == "assistant" and isinstance(m["content"], list)
                for b in m["content"] if b.get("type") == "tool_use"]
        assert [b["name"] for b in sent] == ["Write"] and "go on" in json.dumps(first["messages"][-1])


# -- inside a recorded run: the run's ledger, and replay's check before a tool runs --------------------
def test_inside_a_run_tool_calls_go_on_its_ledger_and_replay_answers_or_denies_irreversible_calls(claude, tmp_path):
    channel, replay_file = tmp_path / "channel.jsonl", tmp_path / "replay.json"
    bash = {"command": "curl -X POST https://mail.example/send", "description": "send"}
    failing = {"command": "make deploy", "description": "deploy"}
    keyed = {"command": "curl -H 'Authorization: Bearer sk-ant-api03-" + "x" * 40 + "' https://x/send"}
    mcp = {"to": "a@example.com"}
    run = dict(claude.env, GIT_PF_MODE="record", GIT_PF_CHANNEL=str(channel))
    rec = Claude(claude.project, claude.transcript, run)
    rec.hook("SessionStart", source="startup")
    rec.tool("Bash", bash, {"stdout": "sent 'it'\n\u00e9", "stderr": "warn", "interrupted": False, "isImage": False})
    rec.tool("Read", {"file_path": str(claude.project / "app.py")}, None, error="File does not exist.")
    rec.tool("Bash", failing, None, error="Exit code 3\nno target")
    rec.tool("Bash", keyed, {"stdout": "token sk-ant-api03-" + "y" * 40, "stderr": ""})
    rec.tool("mcp__mail__send", mcp, {"ok": True})
    events = [json.loads(l) for l in channel.read_text().splitlines()]
    assert [(e["t"], e["entry"]["tool"], e["entry"]["side_effect_class"]) for e in events] == [
        ("effect", "Bash", "irreversible"), ("effect", "Read", "pure"), ("effect", "Bash", "irreversible"),
        ("effect", "Bash", "irreversible"), ("effect", "mcp__mail__send", "irreversible")]
    assert events[0]["entry"]["result"]["stdout"] == "sent 'it'\n\u00e9" and events[1]["entry"]["error"] == "File does not exist."
    assert events[3]["entry"]["redacted"] is True and "redacted" not in events[0]["entry"]
    recorded = ledger.chain([e["entry"] for e in events], "channel")  # what the run's ledger holds

    replay_file.write_text(json.dumps({"v": 1, "mode": "replay", "draws": [], "effects": recorded,
                                       "allow_effects": False}))
    channel.write_text("")
    play = Claude(claude.project, claude.transcript,
                  dict(claude.env, GIT_PF_MODE="replay", GIT_PF_CHANNEL=str(channel), GIT_PF_REPLAY=str(replay_file)))
    said = lambda out: json.loads(out.stdout)["hookSpecificOutput"]
    # on the ledger: never sent again; the substitute gives back the recorded output and status
    same = said(play.hook("PreToolUse", tool_name="Bash", tool_input=bash, tool_use_id="toolu_a"))
    assert same["permissionDecision"] == "allow" and same["updatedInput"]["description"] == "send"
    sub = subprocess.run(["sh", "-c", same["updatedInput"]["command"]], capture_output=True)
    assert (sub.returncode, sub.stdout, sub.stderr) == (0, "sent 'it'\n\u00e9".encode(), b"warn")
    fail = said(play.hook("PreToolUse", tool_name="Bash", tool_input=failing, tool_use_id="toolu_f"))
    sub = subprocess.run(["sh", "-c", fail["updatedInput"]["command"]], capture_output=True)
    assert (sub.returncode, sub.stdout, sub.stderr) == (3, b"no target", b"")
    assert [(e["t"], e["how"]) for e in map(json.loads, channel.read_text().splitlines())] == [
        ("replayed", "answered"), ("replayed", "answered")]
    # its PostToolUse (with the rewritten input) adds nothing to a run's ledger
    run_env = dict(play.env, GIT_PF_MODE="run")
    Claude(claude.project, claude.transcript, run_env).hook(
        "PostToolUse", tool_name="Bash", tool_input=same["updatedInput"], tool_response={"stdout": "x"},
        tool_use_id="toolu_a")
    assert len(channel.read_text().splitlines()) == 2
    channel.write_text("")
    # each entry answers one call: the same call again is not on the ledger any more
    again = said(play.hook("PreToolUse", tool_name="Bash", tool_input=bash, tool_use_id="toolu_a2"))
    assert again["permissionDecision"] == "deny" and "--allow-effects" in again["permissionDecisionReason"]
    # a redacted output, and a tool with no substitute, are denied, saying why
    red = said(play.hook("PreToolUse", tool_name="Bash", tool_input=keyed, tool_use_id="toolu_k"))
    assert red["permissionDecision"] == "deny" and "redacted" in red["permissionDecisionReason"]
    mail = said(play.hook("PreToolUse", tool_name="mcp__mail__send", tool_input=mcp, tool_use_id="toolu_m"))
    assert mail["permissionDecision"] == "deny" and "only a Bash call" in mail["permissionDecisionReason"]
    assert [json.loads(l)["t"] for l in channel.read_text().splitlines()] == ["diverged"] * 3
    channel.write_text("")
    other = said(play.hook("PreToolUse", tool_name="Bash", tool_input={**bash, "command": "curl -X POST https://x/send"},
                           tool_use_id="toolu_b"))
    assert other["permissionDecision"] == "deny" and "--allow-effects" in other["permissionDecisionReason"]
    assert [json.loads(l)["t"] for l in channel.read_text().splitlines()] == ["diverged"]
    assert play.hook("PreToolUse", tool_name="Write", tool_input={"file_path": "x", "content": ""},
                     tool_use_id="toolu_c").stdout == b""  # not irreversible: never denied
    replay_file.write_text(json.dumps({"v": 1, "mode": "replay", "draws": [], "effects": recorded,
                                       "allow_effects": True}))
    assert play.hook("PreToolUse", tool_name="Bash", tool_input={"command": "rm -rf /tmp/x"},
                     tool_use_id="toolu_d").stdout == b""  # --allow-effects


def test_inside_a_run_a_tools_class_comes_from_git_config_too(claude, tmp_path):
    channel, replay_file = tmp_path / "channel.jsonl", tmp_path / "replay.json"
    subprocess.run(["git", "config", "pf.claudeCode.Bash.sideEffect", "idempotent"], cwd=claude.project, check=True)
    rec = Claude(claude.project, claude.transcript, dict(claude.env, GIT_PF_MODE="record", GIT_PF_CHANNEL=str(channel)))
    rec.tool("Bash", {"command": "make"}, {"stdout": "ok", "stderr": ""})
    assert json.loads(channel.read_text())["entry"]["side_effect_class"] == "idempotent"
    replay_file.write_text(json.dumps({"v": 1, "mode": "replay", "draws": [], "effects": [], "allow_effects": False}))
    play = Claude(claude.project, claude.transcript, dict(claude.env, GIT_PF_MODE="replay", GIT_PF_CHANNEL=str(channel),
                                                          GIT_PF_REPLAY=str(replay_file)))
    assert play.hook("PreToolUse", tool_name="Bash", tool_input={"command": "make other"},
                     tool_use_id="toolu_x").stdout == b""  # idempotent: replay may make it again
    subprocess.run(["git", "config", "pf.claudeCode.Bash.sideEffect", "sometimes"], cwd=claude.project, check=True)
    out = rec.tool("Bash", {"command": "make"}, {"stdout": "ok"}, check_stderr=False)
    assert out.returncode == 0 and b"sideEffect must be one of" in out.stderr and len(out.stderr.splitlines()) == 1


def test_a_step_whose_transcript_lags_still_holds_its_own_call_and_the_next_step_carries_it(claude):
    claude.hook("SessionStart", source="startup")
    claude.hook("UserPromptSubmit", prompt="go")
    claude.line(type="user", message={"role": "user", "content": "go"})
    bash = {"command": "make", "description": "build"}
    claude.hook("PostToolUse", tool_name="Bash", tool_input=bash, tool_response={"stdout": "built"},
                tool_use_id="toolu_late")  # the transcript has not got the call's lines yet
    repo = Repo.open(claude.project)
    branch = f"cc/{SID}"
    first = _messages(repo, branch)
    assert first[-2]["content"] == [{"type": "tool_use", "id": "toolu_late", "name": "Bash", "input": bash}]
    assert first[-1]["content"][0]["tool_use_id"] == "toolu_late" and "built" in first[-1]["content"][0]["content"]
    assert repo.resolve(branch).trailer("Pf-Claude-Pending") == ["toolu_late"]
    claude.tool("Read", {"file_path": "app.py"}, None, error="File does not exist.")  # still behind for toolu_late
    second = _messages(repo, branch)
    uses = [b["id"] for m in second if isinstance(m["content"], list) for b in m["content"] if b["type"] == "tool_use"]
    read = f"toolu_{claude.n - 2:04d}"
    assert uses == [read, "toolu_late"]  # the Read's own line, then the late call carried from its event
    assert repo.resolve(branch).trailer("Pf-Claude-Pending") == [f"toolu_late,{read}"]
    failed = _ledger(repo, branch)[-1]
    assert failed["failed"] is True and failed["error"] == "File does not exist." and failed["result"] is None
    claude.hook("Stop", stop_hook_active=False, last_assistant_message="Could not read it.")
    final = _messages(repo, branch)  # the final image still carries both, and the answer
    assert final[-1]["content"] == [{"type": "text", "text": "Could not read it."}]
    assert {"toolu_late", read} <= {b.get("tool_use_id") for m in final if isinstance(m["content"], list)
                                    for b in m["content"]}


def test_rewind_to_a_turn_and_never_the_settings_files(claude, tmp_path):
    p = claude.project
    settings = p / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text('{"model": "opus"}\n')
    _session(claude)  # turn 1
    claude.hook("UserPromptSubmit", prompt="again")
    (p / "turn2.txt").write_text("two\n")
    claude.tool("Write", {"file_path": str(p / "turn2.txt"), "content": "two\n"}, {"type": "create"})
    claude.hook("Stop", stop_hook_active=False, last_assistant_message="Second.")
    repo = Repo.open(p)
    assert repo.git.references.get(f"refs/pf/tags/cc/{SID}/turn-2") is not None
    assert ".claude/settings.json" not in _world(repo, f"cc/{SID}")
    settings.write_text('{"model": "sonnet"}\n')  # changed since: a rewind leaves it as it is now
    run = lambda *a: subprocess.run(["git", "pf", "rewind", *a], cwd=p, env=claude.env, capture_output=True, text=True)
    out = run("--to-turn", "1", "--yes", "--json")
    assert out.returncode == 0, out.stderr
    assert not (p / "turn2.txt").exists() and (p / "out.txt").exists()
    assert settings.read_text() == '{"model": "sonnet"}\n'
    assert run("--to-turn", "3", "--yes").returncode == 2
    kept = claude.transcript.read_bytes()  # a transcript path from an event that is not <session>.jsonl
    out = run("--to-turn", "1", "--scope", "conversation", "--yes")
    assert out.returncode == 2 and "is not the transcript of session" in out.stderr
    assert claude.transcript.read_bytes() == kept
    assert run("--to-step", "1", "--to-turn", "1", "--yes").returncode == 2
    into = tmp_path / "a" / "b"  # checkout makes the missing parents
    got = subprocess.run(["git", "pf", "checkout", f"cc/{SID}", "--into", str(into)], cwd=p, env=claude.env,
                         capture_output=True, text=True)
    assert got.returncode == 0, got.stderr
    assert (into / "turn2.txt").read_text() == "two\n"


@pytest.mark.skipif(cli.missing() is not None, reason=str(cli.missing()))
def test_the_real_cli_recorded_by_git_pf_record_puts_its_tool_calls_on_the_runs_ledger(project, tmp_path):
    root, env = project
    assert subprocess.run(["git", "pf", "install", "--claude-code"], cwd=root, env=env).returncode == 0
    with cli.ScriptedAnthropic(cli.session(root)) as server:
        cenv = cli.claude_env(env, server.url, tmp_path / "claude-config")
        del cenv["ANTHROPIC_BASE_URL"]  # the recorder points the CLI at its proxy
        out = subprocess.run(["git", "pf", "record", "--name", "cc-run", "--fs-root", str(root), "--upstream",
                              f"anthropic={server.url}", "--json", "--", str(cli.CLAUDE), "-p", "make hello.py",
                              "--dangerously-skip-permissions", "--output-format", "json"],
                             cwd=root, env=cenv, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    effects = _ledger(Repo.open(root), "cc-run")
    assert [(e["tool"], e["side_effect_class"], e.get("error")) for e in effects] == [
        ("Write", "idempotent", None), ("Bash", "irreversible", "Exit code 3"), ("Edit", "idempotent", None)]
    assert ledger.verify(effects) == []


@pytest.mark.skipif(cli.missing() is not None, reason=str(cli.missing()))
def test_the_real_cli_replayed_never_sends_a_recorded_irreversible_call_again(project, tmp_path):
    """A Bash call that appends to a file outside the world (an email sent, say) runs once, at record:
    replay answers it from the ledger through updatedInput, and stays bit-exact."""
    root, env = project
    marker, proj = tmp_path / "outside" / "sent.log", tmp_path / "proj"
    marker.parent.mkdir()
    assert subprocess.run(["git", "pf", "install", "--claude-code"], cwd=root, env=env).returncode == 0
    # the agent's project is no git work tree (a replay's world holds no .git, and Claude Code's
    # requests say whether there is one); the hooks are the ones install wrote
    (proj / ".claude").mkdir(parents=True)
    (root / ".claude" / "settings.json").rename(proj / ".claude" / "settings.json")
    env = dict(env, GIT_PF_REPO=str(root), CLAUDE_PROJECT_DIR=str(proj))
    send = {"command": f"echo mail >> '{marker}' && echo 'sent 1 mail' && echo 'queued' >&2",
            "description": "send the mail"}
    script = [{"tool": "Write", "args": {"file_path": str(proj / "hello.py"), "content": "print('hi')\n"}},
              {"tool": "Bash", "args": send}, "Sent."]
    claude = ["sh", "-c", f"cd '{proj}' && exec " + " ".join(map(shlex.quote, [
        str(cli.CLAUDE), "-p", "send it", "--dangerously-skip-permissions", "--output-format", "json"]))]
    with cli.ScriptedAnthropic(script) as server:
        cenv = cli.claude_env(env, server.url, tmp_path / "claude-config")
        del cenv["ANTHROPIC_BASE_URL"]  # the recorder points the CLI at its proxy
        out = subprocess.run(["git", "pf", "record", "--name", "mail", "--fs-root", str(proj), "--upstream",
                              f"anthropic={server.url}", "--json", "--", *claude],
                             cwd=root, env=cenv, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        served = len(server.served())
    assert marker.read_text() == "mail\n"
    effects = _ledger(Repo.open(root), "mail")
    assert [(e["tool"], e["side_effect_class"]) for e in effects] == [("Write", "idempotent"), ("Bash", "irreversible")]
    assert effects[1]["result"]["stdout"].startswith("sent 1 mail")
    played = subprocess.run(["git", "pf", "replay", "mail", "--json", "--", *claude], cwd=root, env=cenv,
                            capture_output=True, text=True, timeout=300)
    got = report(played.stdout)
    assert played.returncode == 0 and got["bit_exact"] is True, (got.get("mismatch"), got.get("divergence"),
                                                                 played.stderr[-2000:])
    assert got["effects"] == {"replayed": 2, "of": 2}
    assert marker.read_text() == "mail\n"  # sent once, at record; the replay sent nothing
    assert len(server.served()) == served
    assert (proj / "hello.py").read_text() == "print('hi')\n"  # the replay wrote in its own world
    assert not [r for r in Repo.open(root).git.references if "/cc/" in r]  # the run is the record: no session branch
