"""Packed tapes (docs/format.md §8.1): a recorded run longer than one chunk of 256 entries is
packed as it grows into column chunks (tape layout 4), replays bit-exact and forks across the
chunk boundary; any tape written whole comes back byte for byte; draws and clocks take columns of
their own; tapes of layout 1 (every entry loose), layout 2 (plain chunks) and layout 3 (column
chunks without those) still read, replay and diff; a hostile chunk is one clear error.
On real repositories, the real git-pf command and a real child process."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pygit2
import pytest
import zstandard

from git_pf import Repo
from git_pf.image import manifest as img
from git_pf.core.errors import DataError, MissingObject
from git_pf.image.tree import MODE_FILE, TreeWriter
from git_pf.layers.trace import tape, tapechunk, tapecols
from git_pf.testing.fakellm import FakeLLM

EXCHANGES = 300  # past the first chunk of 256
PF = str(Path(sys.executable).with_name("git-pf"))
CHILD = """
import http.client, json, os, sys
from pathlib import Path
from urllib.parse import urlsplit
url = urlsplit(os.environ["OPENAI_BASE_URL"])
conn = http.client.HTTPConnection(url.hostname, url.port, timeout=60)
for i in range(int(sys.argv[1])):
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": f"exchange {i}"}]})
    conn.request("POST", url.path.rstrip("/") + "/chat/completions", body, {"content-type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    if resp.status != 200:
        sys.exit(3)
    if i % 100 == 0:
        (Path(os.environ["GIT_PF_WORLD"]) / f"out{i}.txt").write_bytes(data)
"""


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """A repository holding run ``run`` of EXCHANGES exchanges, and the child's command line."""
    base = tmp_path_factory.mktemp("chunks")
    root, sandbox = base / "repo", base / "sb"
    sandbox.mkdir()
    _git(base, "init", "-q", str(root))
    (base / "child.py").write_text(CHILD)
    child = [sys.executable, str(base / "child.py"), str(EXCHANGES)]
    with FakeLLM(["ok"]) as fake:
        subprocess.run([PF, "record", "--name", "run", "--fs-root", sandbox, "--upstream", fake.url, "--",
                        *child], cwd=root, check=True, capture_output=True)
    return root, child


def _pf(root: Path, *args, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([PF, *map(str, args)], cwd=root, capture_output=True, text=True)
    assert not check or proc.returncode == 0, proc.stderr
    return proc


def _tape_names(root: Path, rev: str) -> list[str]:
    return _git(root, "ls-tree", "--name-only", f"{rev}:trace/tape").split()


def _step(root: Path, n: int) -> str:
    return _pf(root, "show", "run", "--step", n, "--json").stdout


def test_a_run_longer_than_a_chunk_is_packed_as_it_grows_and_replays_bit_exact(recorded):
    root, child = recorded
    steps = {n: json.loads(_step(root, n))["id"] for n in (255, 256, 257, EXCHANGES)}
    assert len(_tape_names(root, steps[255])) == 255  # all loose until the chunk is full
    assert _tape_names(root, steps[256]) == [n for n in _tape_names(root, steps[256]) if n.endswith(".zst")] != []
    first, *rest = _tape_names(root, steps[257])
    assert first.startswith("00000000+0256-") and len(rest) == 1 and rest[0].startswith("00000256-")
    assert all(n.endswith(".col.zst") for n in _tape_names(root, "refs/pf/heads/run"))  # the end image packs its last chunk
    repo = Repo.open(root)
    entries = tape.read(repo.git, repo.resolve("run").tree)
    assert [e["step"] for e in entries[:-1]] == list(range(1, EXCHANGES + 1)) and entries[-1]["kind"] == "end"
    proc = _pf(root, "replay", "run", "--json", "--", *child)
    report = json.loads(proc.stdout[proc.stdout.index("{"):])
    assert report["bit_exact"] and report["exchanges"] == {"served": EXCHANGES, "of": EXCHANGES}
    assert _pf(root, "fsck").returncode == 0


def test_fork_diff_and_checkout_work_across_the_chunk_boundary(recorded, tmp_path):
    root, _ = recorded
    reply = tmp_path / "reply.txt"
    reply.write_text("changed at 258")
    _pf(root, "fork", "run", "--at-step", 258, "--response", reply, "--name", "edited")
    repo = Repo.open(root)
    forked, source = (tape.read(repo.git, repo.resolve(r).tree) for r in ("edited", "run"))
    assert len(forked) == 258 and forked[:257] == source[:257] and forked[257] != source[257]
    assert "changed at 258" in json.dumps(forked[257]["response"])
    diff = _pf(root, "diff", "run", "edited").stdout
    assert "tape 1 added, 44 removed" in diff, diff  # 258 changed; 259..300 and the end are not in the fork
    _pf(root, "checkout", "edited", "--layers", "trace", "--into", tmp_path / "co")
    files = sorted((tmp_path / "co" / "trace" / "tape").iterdir())
    assert len(files) == 258 and json.loads(files[257].read_bytes())["step"] == 258


def test_report_reads_a_packed_run(recorded, tmp_path):
    root, _ = recorded
    proc = _pf(root, "report", "run", "-o", tmp_path / "r.html")
    assert (tmp_path / "r.html").stat().st_size > 0, proc.stderr


def _relayout(repo: Repo, rev: str, branch: str, files: list[tuple[bytes, bytes]]) -> str:
    """Branch ``branch``: a copy of the image ``rev`` (same parents, message and the rest of its
    tree) whose tape tree holds ``files``."""
    git, image = repo.git, repo.resolve(rev)
    writer = TreeWriter(git)
    edit = img.TreeEdit(git, image.tree)
    edit.put_tree(tape.PATH, writer.write((n, MODE_FILE, git.create_blob(d).raw) for n, d in files).hex())
    commit = git[image.id]
    oid = git.create_commit(None, commit.author, commit.committer, commit.message, pygit2.Oid(hex=edit.write()),
                            commit.parent_ids)
    git.references.create(f"refs/pf/heads/{branch}", oid)
    return str(oid)


def _layout_1(repo: Repo, rev: str) -> list[tuple[bytes, bytes]]:
    """The tape of ``rev`` as tapes were written before packed chunks: every entry loose."""
    return [(name, data) for name, data, _ in tape.stored(repo.git, repo.resolve(rev).tree)]


def test_a_tape_of_layout_1_still_reads_replays_and_diffs(recorded):
    root, child = recorded
    repo = Repo.open(root)
    _relayout(repo, "run", "old", _layout_1(repo, "run"))
    assert len(_tape_names(root, "refs/pf/heads/old")) == EXCHANGES + 1
    assert tape.read(repo.git, repo.resolve("old").tree) == tape.read(repo.git, repo.resolve("run").tree)
    assert "tape" not in _pf(root, "diff", "old", "run").stdout  # the same entries, however stored
    proc = _pf(root, "replay", "old", "--json", "--", *child)
    assert json.loads(proc.stdout[proc.stdout.index("{"):])["bit_exact"]
    assert _pf(root, "show", "old").returncode == 0


def _layout_2(repo: Repo, rev: str) -> list[tuple[bytes, bytes]]:
    """The tape of ``rev`` as tape layout 2 wrote it: each chunk one zstd frame of its entries' bytes."""
    entries = [data for _, data, _ in tape.stored(repo.git, repo.resolve(rev).tree)]
    out, seq = [], 0
    for group in tapechunk.groups(entries):
        content = b"".join(group)
        digest = tape.entry_name(0, content)[9:25]
        out.append((b"%08d+%04d-%s.zst" % (seq, len(group), digest), _frame(content, write_checksum=True)))
        seq += len(group)
    return out


def test_a_tape_of_layout_2_still_reads_replays_and_diffs(recorded):
    root, child = recorded
    repo = Repo.open(root)
    _relayout(repo, "run", "plain", _layout_2(repo, "run"))
    names = _tape_names(root, "refs/pf/heads/plain")
    assert len(names) == 2 and all(n.endswith(".zst") and not n.endswith(".col.zst") for n in names)
    assert tape.read(repo.git, repo.resolve("plain").tree) == tape.read(repo.git, repo.resolve("run").tree)
    assert "tape" not in _pf(root, "diff", "plain", "run").stdout
    proc = _pf(root, "replay", "plain", "--json", "--", *child)
    assert json.loads(proc.stdout[proc.stdout.index("{"):])["bit_exact"]
    assert _pf(root, "fsck").returncode == 0


def _layout_3(repo: Repo, rev: str) -> list[tuple[bytes, bytes]]:
    """The tape of ``rev`` as tape layout 3 wrote it: column chunks without layout 4's draw and clock
    columns, each after the first compressed against the first's columns."""
    entries = [data for _, data, _ in tape.stored(repo.git, repo.resolve(rev).tree)]
    out, seq, base = [], 0, None
    for group in tapechunk.groups(entries):
        columns = tapecols.encode(group, layout=3)
        digest = tape.entry_name(0, b"".join(group))[9:25]
        if base is None:
            out.append((b"%08d+%04d-%s.col.zst" % (seq, len(group), digest), _frame(columns, write_checksum=True)))
            base = tapechunk.Base(columns)
        else:
            out.append((b"%08d+%04d-%s-%s.col.zst" % (seq, len(group), digest, base.digest), base.compress(columns)))
        seq += len(group)
    return out


def test_a_tape_of_layout_3_still_reads_replays_and_diffs(recorded):
    root, child = recorded
    repo = Repo.open(root)
    old = _layout_3(repo, "run")
    assert zstandard.ZstdDecompressor().decompress(old[0][1]).startswith(b'["pf-tape-columns",3]\n')
    _relayout(repo, "run", "cols3", old)
    assert {n for n, _ in old} != {n.encode() for n in _tape_names(root, "refs/pf/heads/run")}  # other bases
    assert tape.read(repo.git, repo.resolve("cols3").tree) == tape.read(repo.git, repo.resolve("run").tree)
    assert "tape" not in _pf(root, "diff", "cols3", "run").stdout
    proc = _pf(root, "replay", "cols3", "--json", "--", *child)
    assert json.loads(proc.stdout[proc.stdout.index("{"):])["bit_exact"]
    assert _pf(root, "fsck").returncode == 0


def test_draws_and_clocks_take_columns_of_their_own(repo, tmp_path):
    clock, entries = 1795805236.1516116, []
    for i in range(256):
        clock += 0.0043 + (i % 7) * 1e-6
        entries.append({"v": 2, "ms": 1.5 + i % 3, "draws": [{"fn": "time.time", "v": clock}, {"fn": "time.time_ns",
                        "v": int(clock * 1e9) + i}, {"fn": "uuid.uuid4", "v": None}, {"fn": "os.urandom", "v": 4}]})
    data = [data for _, data in tape.encode(entries)]
    payload = tapecols.encode(data)
    assert b'[".draws[].v@time.time#d",' in payload and b'[".draws[].v@time.time_ns#i",' in payload
    assert b'[".ms#f",' in payload  # short floats that are no clock keep their digits
    assert tapecols.decode(payload, 256, 1 << 24) == b"".join(data)
    assert len(_frame(payload)) < 0.6 * len(_frame(tapecols.encode(data, layout=3)))


def test_a_column_chunk_is_smaller_than_a_plain_one(recorded):
    root, _ = recorded
    repo = Repo.open(root)
    sizes = {rev: sum(len(repo.git[pygit2.Oid(raw=oid)].data) for _, oid in tape.items(repo.git, repo.resolve(rev).tree))
             for rev in ("run", "plain")}
    assert sizes["run"] < sizes["plain"], sizes


ODD = [  # entries a tape may hold, each of which must come back byte for byte from a column chunk
    {"s": "é ☃ \"quoted\" \n line", "n": None, "t": True, "f": False, "e": {}, "l": []},
    {"big": 2**300, "neg": -(2**70), "zero": 0, "float": -0.0, "tiny": 5e-324, "huge": 1.7976931348623157e308},
    {"nested": [[1, [2.5, "x"]], {"k": [None, {"deeper": [True]}]}], "n": 3},
    {"lone": "\udcff surrogate", "n": 7},
    {"same key.path": 1, "same key": {"path": "two paths, one column"}},
]


def test_any_tape_comes_back_byte_for_byte_from_column_chunks(repo, tmp_path):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    exchanges = [dict(ODD[i % len(ODD)], i=i, n=i * 1000003 - 7) for i in range(300)]
    repo.snapshot(sandbox, name="odd", layers=(tape.TapeInput(exchanges),))
    tree = repo.resolve("odd").tree
    assert [n for n, _ in tape.items(repo.git, tree)][0].endswith(b".col.zst")
    assert [data for _, data, _ in tape.stored(repo.git, tree)] == [data for _, data in tape.encode(exchanges)]
    assert tape.read(repo.git, tree) == exchanges


def test_a_chunk_near_its_size_bound_is_still_stored_as_columns(repo, tmp_path):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    # 41 fill a chunk's 8 MiB within 24 KB; their columns take 2 bytes more an integer (164 KB)
    exchanges = [{"i": i, "n": [7] * 2000, "s": "x" * 200_000} for i in range(45)]
    repo.snapshot(sandbox, name="big", layers=(tape.TapeInput(exchanges),))
    tree = repo.resolve("big").tree
    first = tape.items(repo.git, tree)[0][0]
    assert first.startswith(b"00000000+0041-") and first.endswith(b".col.zst"), first
    assert tape.read(repo.git, tree) == exchanges


def _chunk_of(repo: Repo, rev: str) -> tuple[bytes, list[bytes]]:
    name, oid = tape.items(repo.git, repo.resolve(rev).tree)[0]
    return name, [data for _, data, _ in tape.load(repo.git, name, oid)]


def _frame(content: bytes, **kw) -> bytes:
    return zstandard.ZstdCompressor(level=3, **kw).compress(content)


HOSTILE = {  # case -> (chunk name, blob) made from the good chunk's name and entries, and what the error says
    "bomb": (lambda name, e: (name, _frame(b"\n" * (64 << 20))), "must declare a content size of at most"),
    "no-size": (lambda name, e: (name, _frame(b"".join(e), write_content_size=False)), "must declare a content size"),
    "not-zstd": (lambda name, e: (name, b"no frame here"), "not a zstd frame"),
    "oversized": (lambda name, e: (name, b"\0" * (tapechunk.stored_cap(256) + 1)), "over a chunk's size bound"),
    "two-frames": (lambda name, e: (name, _frame(b"".join(e)) * 2), "one zstd frame"),
    "missing-entry": (lambda name, e: _claiming_256(tapechunk.pack(0, e[:-1])[1]), "must hold 256 newline-ended"),
    "hash": (lambda name, e: (name, tapechunk.pack(0, e[1:] + e[:1])[1]), "does not match its content"),
    # column chunks (layout 3): what a payload refers to, and what it would decode to, is checked
    "plain-under-a-column-name": (lambda name, e: (name, _frame(b"".join(e))), "does not start with the column header"),
    "missing-column": (lambda name, e: (name, _columns([{"a": 0}] * 256)), "shapes take more values than a column holds"),
    "values-left-over": (lambda name, e: (name, _columns([{}] * 256, [".a#s", ["x"]])), "values no entry takes"),
    "wrong-type": (lambda name, e: (name, _columns([{"a": 1}] * 256, [".a#i", ["1"]])), "value of another type"),
    "shape-of-a-string": (lambda name, e: (name, _columns([{"a": "x"}] * 256)), "malformed shape"),
    "integer-bomb": (lambda name, e: (name, _columns([{"n": [1] * 20000}] + [{}] * 255, [".n[]#i", [10**4000] + [0] * 19999])),
                     "would be over 8388608 bytes"),
    "long-integer": (lambda name, e: (name, _columns([{"n": [1] * 10}] + [{}] * 255, [".n[]#i", [10**4299] * 10])),
                     "integer too long to write"),
    # layout 4: a float column as its bits' differences; a draw's function in its shape
    "float-bits-not-finite": (lambda name, e: (name, _columns([{"f": 2}] * 256, [".f#d", [0x7FF0000000000000] + [0] * 255])),
                              "not a finite double"),
    "float-bits-past-64": (lambda name, e: (name, _columns([{"f": 2}] * 256, [".f#d", [1 << 62] * 256])),
                           "not a finite double"),
    "floats-twice": (lambda name, e: (name, _columns([{"f": 2}] * 256, [".f#d", [0] * 128], [".f#f", [0.0] * 128])),
                     "floats of .f#f twice"),
    "string-in-a-shape": (lambda name, e: (name, _columns([{"fn": "x"}] * 256)), "malformed shape"),
    "layout-3-draw": (lambda name, e: (name, _columns([{"fn": "x", "v": 1}] * 256, [".v@x#i", [0] * 256], layout=3)),
                      "malformed shape"),
}


def _columns(shapes: list, *columns: list, layout: int = 4) -> bytes:
    """A column chunk's blob holding ``shapes`` and ``columns`` as they are, well-formed or not."""
    return _frame(b'["pf-tape-columns",%d]\n' % layout + b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n"
                                           for x in (*shapes, *columns)))


def _claiming_256(blob: bytes) -> tuple[bytes, bytes]:
    """``blob`` under a name that claims 256 entries but carries the hash of what the blob holds."""
    content = zstandard.ZstdDecompressor().decompress(blob)
    return tapechunk.pack(0, [content])[0].replace(b"+0001-", b"+0256-"), blob


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_chunk_is_one_clear_error(recorded, case, tmp_path):
    root, _ = recorded
    repo = Repo.open(root)
    name, entries = _chunk_of(repo, "run")
    make, says = HOSTILE[case]
    bad = make(name, entries)
    _relayout(repo, "run", f"bad-{case}", [bad])
    with pytest.raises(DataError, match=says):
        tape.read(repo.git, repo.resolve(f"bad-{case}").tree)
    for args in (("show", f"bad-{case}"), ("fsck",)):
        proc = _pf(root, *args, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert says in proc.stdout + proc.stderr and "trace/tape/" in proc.stdout + proc.stderr
    subprocess.run(["git", "update-ref", "-d", f"refs/pf/heads/bad-{case}"], cwd=root, check=True)


def test_a_chunk_whose_first_chunk_is_not_in_the_tape_is_one_clear_error(recorded):
    root, _ = recorded
    repo = Repo.open(root)
    first, later = tape.items(repo.git, repo.resolve("run").tree)
    assert tapechunk.base_of(later[0]) is not None  # compressed against the first chunk's columns
    blob = repo.git[pygit2.Oid(raw=later[1])].data
    _relayout(repo, "run", "headless", [(later[0], blob)])
    with pytest.raises(DataError, match="the chunk it is compressed against .* is not in the tape"):
        tape.read(repo.git, repo.resolve("headless").tree)
    for args in (("show", "headless"), ("fsck",)):
        proc = _pf(root, *args, check=False)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr
        assert "is not in the tape" in proc.stdout + proc.stderr and later[0].decode() in proc.stdout + proc.stderr
    subprocess.run(["git", "update-ref", "-d", "refs/pf/heads/headless"], cwd=root, check=True)
    name = first[0].replace(b".col.zst", b"-" + tapechunk.base_of(later[0]) + b".col.zst")  # the first naming a base
    with pytest.raises(DataError, match="not a tape entry"):
        tape.check_name(name, MODE_FILE)


def test_a_chunk_whose_blob_is_missing_is_named(recorded):
    root, _ = recorded
    repo = Repo.open(root)
    name, _ = _chunk_of(repo, "run")
    with pytest.raises(MissingObject, match=re.escape(name.decode())):
        tape.load(repo.git, name, b"\x01" * 20)


def test_forks_across_a_chunk_boundary_merge_into_their_union(repo, tmp_path):
    sandbox = tmp_path / "sb"
    sandbox.mkdir()
    shared = [{"n": i} for i in range(250)]
    repo.snapshot(sandbox, name="main", layers=(tape.TapeInput(shared),))
    [a, b] = repo.fork("main", 2, prefix="try")
    for fork, extra in ((a, 50), (b, 10)):  # each fills the first chunk its own way
        mine = shared + [{"n": i, "side": fork.name} for i in range(250, 250 + extra)]
        repo.snapshot(sandbox, name=fork.name, layers=(tape.TapeInput(mine),), allow_empty=True)
    assert repo.merge(a.name, into="main").status == "fast-forward"
    result = repo.merge(b.name, into="main")
    assert result.status == "merged", result
    merged = repo.resolve("main")
    got = tape.read(repo.git, merged.tree)
    assert len(got) == 310 and got[:250] == shared  # the shared entries once, both sides' own after them
    assert sum(1 for e in got if e.get("side") == b.name) == 10
    assert merged.manifest["layers"]["tape"] == {"exchanges": 310}
