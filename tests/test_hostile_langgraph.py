"""A LangGraph thread fetched from a hostile remote runs no code and costs bounded memory
(docs/security.md, "LangGraph checkpoints"). An attacker with push access rewrites the latest
image of a thread with plumbing: a channel value becomes a msgpack extension naming
``os.system`` (or ``subprocess.Popen``), the checkpoint trailer kept and ``Pf-LangGraph-Rev``
raised, and pushes it to a bare remote. The victim runs ``git pf clone`` and ``get_state`` on a
real ``StateGraph`` with ``PfSaver``: nothing runs and one ``DataError`` names the image, the
thread and the channel. A 1 GiB blob of zeros as a channel value is refused from its object
header, never read. Types the user registers still decode."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import subprocess
import sys
import textwrap
import zlib
from dataclasses import dataclass
from pathlib import Path

import pytest

pytest.importorskip("langgraph.checkpoint.conformance")

import ormsgpack  # noqa: E402
import pygit2  # noqa: E402
from langchain_core.messages import HumanMessage  # noqa: E402
from langgraph.graph import END, START, StateGraph  # noqa: E402
from typing_extensions import TypedDict  # noqa: E402

from git_pf.core.errors import DataError  # noqa: E402
from git_pf.integrations.langgraph import PfSaver  # noqa: E402

from test_integrations_langgraph import build, git  # noqa: E402

CONFIG = {"configurable": {"thread_id": "t1"}}
BRANCH = "refs/pf/heads/lg/t1"


def _ext(code: int, payload: list) -> bytes:
    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(payload)))


def payloads(marker: Path) -> dict[str, bytes]:
    """Each a msgpack value that makes LangGraph's default serializer run ``touch marker``."""
    return {
        "os.system": _ext(0, ["os", "system", f"touch {marker}"]),
        "subprocess.Popen": _ext(2, ["subprocess", "Popen", {"args": ["touch", str(marker)]}]),
        # nested inside an allowed type's argument: every extension is checked
        "nested": _ext(1, ["builtins", "set", [[ormsgpack.Ext(0, ormsgpack.packb(["os", "system",
                                                                                  f"touch {marker}"]))]]]),
    }


def replace_value(repo_dir: Path, channel: str, blob: pygit2.Oid, ref: str = BRANCH,
                  kind: str | None = None) -> str:
    """The attacker's plumbing: a child of ``ref``'s image whose ``langgraph/values/<channel>``
    is ``blob`` (and its type in ``checkpoint.json`` ``kind``, when given), with the tip's
    trailers and ``Pf-LangGraph-Rev`` raised; ``ref`` moves to it. The new image's id."""
    repo = pygit2.Repository(str(repo_dir))
    tip = repo.revparse_single(ref)
    lg = tip.tree["langgraph"]
    values = repo.TreeBuilder(lg["values"])
    values.insert(channel, blob, pygit2.GIT_FILEMODE_BLOB)
    lg_tree = repo.TreeBuilder(lg)
    lg_tree.insert("values", values.write(), pygit2.GIT_FILEMODE_TREE)
    if kind is not None:
        index = json.loads(lg["checkpoint.json"].data)
        index["channels"][channel][1] = kind
        lg_tree.insert("checkpoint.json", repo.create_blob(json.dumps(index).encode()), pygit2.GIT_FILEMODE_BLOB)
    top = repo.TreeBuilder(tip.tree)
    top.insert("langgraph", lg_tree.write(), pygit2.GIT_FILEMODE_TREE)
    rev = int(next(l for l in tip.message.splitlines() if l.startswith("Pf-LangGraph-Rev: ")).split()[1])
    message = tip.message.replace(f"Pf-LangGraph-Rev: {rev}", f"Pf-LangGraph-Rev: {rev + 1}")
    new = repo.create_commit(None, tip.author, tip.committer, message, top.write(), [tip.id])
    repo.references.create(ref, new, force=True)
    return str(new)


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    """The attacker's clone of two threads (an interrupted two-node graph each, t0 and t1) and
    their bare remote, which holds them as pushed."""
    root = tmp_path_factory.mktemp("lg")
    source, remote = root / "source", root / "remote.git"
    for thread in ("t0", "t1"):
        build(PfSaver(source), ["draft"]).invoke({"messages": [HumanMessage("hi")]},
                                                 {"configurable": {"thread_id": thread}})
    git(root, "init", "-q", "--bare", str(remote))
    git(source, "remote", "add", "origin", str(remote))
    _pf("install", cwd=source)
    git(source, "push", "-q")
    return source, remote


def _pf(*args, cwd=None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
    done = subprocess.run(["git-pf", *map(str, args)], cwd=cwd, capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return done


@pytest.mark.parametrize("case", ["os.system", "subprocess.Popen", "nested"])
def test_a_pushed_checkpoint_naming_a_callable_runs_nothing_on_resume(pushed, tmp_path, case, caplog):
    source, remote = pushed
    marker, bare = tmp_path / "pwned", tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--mirror", str(remote), str(bare))  # this case's copy of the remote
    attacker = pygit2.Repository(str(source))
    tip = attacker.references[BRANCH].target
    evil = replace_value(source, "messages", attacker.create_blob(payloads(marker)[case]))
    git(source, "push", "-q", str(bare), f"{BRANCH}:{BRANCH}")  # a fast-forward: the rev went up
    attacker.references.create(BRANCH, tip, force=True)  # the next case starts from the honest tip

    victim = tmp_path / "victim"
    _pf("clone", bare, victim)
    graph = build(PfSaver(victim), [])
    with caplog.at_level(logging.WARNING), pytest.raises(DataError) as err:
        graph.get_state(CONFIG)
    assert not marker.exists()
    text = str(err.value)
    assert evil[:12] in text and "thread 't1'" in text and "channel 'messages'" in text, text
    assert ("os.system" if case == "nested" else case) in text and "\n" not in text
    assert not [r for r in caplog.records if "serial" in r.getMessage().lower()]  # an error, not a warning
    assert not marker.exists()


class Boom:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_pickled_value_is_refused(pushed, tmp_path):
    victim, marker = tmp_path / "victim", tmp_path / "pwned"
    _pf("clone", pushed[1], victim)
    blob = pygit2.Repository(str(victim)).create_blob(pickle.dumps(Boom(marker)))
    replace_value(victim, "messages", blob, kind="pickle")  # as a fetch would fast-forward it
    with pytest.raises(DataError, match=r"channel 'messages'.*holds values of type 'pickle'"):
        PfSaver(victim).get_tuple(CONFIG)
    assert not marker.exists()


@dataclass
class Grade:
    score: int


class Graded(TypedDict):
    grade: Grade


def _graded(saver: PfSaver):
    g = StateGraph(Graded)
    g.add_node("grade", lambda s: {"grade": Grade(s["grade"].score + 1)})
    g.add_edge(START, "grade")
    g.add_edge("grade", END)
    return g.compile(checkpointer=saver)


def test_a_type_the_user_registers_decodes_and_an_unregistered_one_is_named(tmp_path):
    _graded(PfSaver(tmp_path / "repo")).invoke({"grade": Grade(1)}, CONFIG)
    with pytest.raises(DataError, match=r"channel 'grade' .* holds test_hostile_langgraph\.Grade, which PfSaver does "
                                        r"not decode \(register a type with PfSaver\(allowed_types"):
        _graded(PfSaver(tmp_path / "repo")).get_state(CONFIG)
    for allowed in ([Grade], [("test_hostile_langgraph", "Grade")]):
        state = _graded(PfSaver(tmp_path / "repo", allowed_types=allowed)).get_state(CONFIG)
        assert state.values["grade"] == Grade(2)


def write_zero_blob(git_dir: Path, size: int) -> str:
    """A loose blob of ``size`` zero bytes, streamed (a few MiB on disk, little memory); its id."""
    head = b"blob %d\0" % size
    sha, z = hashlib.sha1(head), zlib.compressobj(1)
    tmp = git_dir / "objects" / "zero.tmp"
    chunk = bytes(1 << 20)
    with open(tmp, "wb") as f:
        f.write(z.compress(head))
        for _ in range(size >> 20):
            sha.update(chunk)
            f.write(z.compress(chunk))
        f.write(z.flush())
    oid = sha.hexdigest()
    (git_dir / "objects" / oid[:2]).mkdir(exist_ok=True)
    os.replace(tmp, git_dir / "objects" / oid[:2] / oid[2:])
    return oid


PEAK = textwrap.dedent("""
    import json, resource, sys
    from git_pf.core.errors import DataError
    from git_pf.integrations.langgraph import PfSaver
    saver = PfSaver(sys.argv[1])
    saver.get_tuple({"configurable": {"thread_id": "t0"}})  # a normal checkpoint
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    try:
        saver.get_tuple({"configurable": {"thread_id": "t1"}})
        error = None
    except DataError as e:
        error = str(e)
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"error": error, "grown_kib": grown}))
""")


def test_a_1gib_value_is_refused_from_its_header_without_being_read(pushed, tmp_path):
    victim = tmp_path / "victim"
    _pf("clone", pushed[1], victim)
    evil = replace_value(victim, "messages", pygit2.Oid(hex=write_zero_blob(victim / ".git", 1 << 30)))
    done = subprocess.run([sys.executable, "-c", PEAK, str(victim)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["error"] and evil[:12] in out["error"] and "channel 'messages'" in out["error"]
    assert "1073741824 bytes, over pf.maxJsonLine" in out["error"]
    assert out["grown_kib"] < 64 * 1024, out
