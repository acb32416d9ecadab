"""Step images: each completed LLM exchange of a recorded run is one image (docs/record.md, "Step images").

A run is a branch. Its step 0 image holds the world before the agent ran;
step N (the N-th exchange to complete) holds the tape of exchanges 1..N, the
trace messages after exchange N, the effects so far and the world as the
agent left it when it sent request N; each carries a ``Pf-Step: N`` trailer,
and the final image of a run adds ``Pf-Run-Exit: <code>``. ``StepWriter``
writes them from the long-lived recording process (the repository stays
open, the sandbox's stat cache stays in memory); ``at_step`` / ``resolve_step``
find a step on a branch; ``run_plan`` is what replay and run read from a
branch (``runplan``). Writes images and moves only the run's branch.

A run's objects go through one ``RunPackWriter``: a pack per step (written
before the branch moves), merged as the run goes and made one at its end,
never a loose object (docs/record.md, "Storage failures"). Storage trouble
never reaches the agent: a step that cannot be written is tried again, then
counted as lost (``failures``), and the final image says how many with
``Pf-Steps-Lost``; the branch only ever moves to complete images.
"""
from __future__ import annotations

import itertools
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from ..image import manifest as img, refs, verify
from ..core import secrets
from ..core.errors import InputFormatError, PfError, UnknownRevision, UsageError, WriteFailed
from ..layers.effects import ledger as effects_mod
from ..layers.trace import exchange, tape as tape_mod, tapechunk
from .llm import wire
from ..image.tree import MODE_FILE, TreeWriter
from ..image.signing import SigningFailed
from ..ops.snapshot import SnapshotRequest, take
from ..store.packfile import RunPackWriter, packing
from . import channel
from .channel import ChannelReader
from .stepworld import Given, LiveWorld, inherited

STEP_TRAILER = "Pf-Step"
RUN_END_TRAILER = "Pf-Run-Exit"
FORKED_TRAILER = "Pf-Forked-From"
LOST_TRAILER = "Pf-Steps-Lost"
RETRY_S = (0.05, 0.25)  # the pauses before a step write is tried again
STORAGE_ERRORS = (WriteFailed, OSError, pygit2.GitError, SigningFailed)  # a step that cannot be signed is lost too
STORAGE_ERRORS += (PfError,)  # the branch could not be moved (a ref that cannot be written)
MAX_STEP = 10**9
_runs = itertools.count(1)


def step_of(image: img.ImageInfo) -> int | None:
    """The step number an image's ``Pf-Step`` trailer gives; None when absent or malformed."""
    values = image.trailer(STEP_TRAILER)
    return parse_step(values[-1]) if values else None


def parse_step(text: str) -> int | None:
    return int(text) if text.isdigit() and text.isascii() and int(text) <= MAX_STEP else None


def _trailers(git, oid: str) -> tuple[tuple[str, str], ...]:
    return img.parse_trailers(git[oid].message)


def at_step(git, rev: str, n: int) -> str:
    """The id of the image with ``Pf-Step: n`` on REV's first-parent line (the newest; where a
    run's final image repeats its last step, the step image itself)."""
    if not isinstance(n, int) or not 0 <= n <= MAX_STEP:
        raise UsageError(f"step must be a number from 0 to {MAX_STEP}, not {n!r}")
    oid = refs.resolve(git, rev)
    found = None
    while True:
        trailers = dict(_trailers(git, oid))
        step = parse_step(trailers.get(STEP_TRAILER, ""))
        if step == n:
            if RUN_END_TRAILER not in trailers:
                return oid
            found = found or oid
        elif step is not None and step < n:
            break
        parents = git[oid].parent_ids
        if not parents:
            break
        oid = str(parents[0])
    if found:
        return found
    raise UnknownRevision(f"'{rev}' has no step {n}")


def resolve_step(repo, rev: str, n: int | None) -> img.ImageInfo:
    """The image REV names, or with ``n`` the image of step n on REV's line (``--at-step``)."""
    return repo.resolve(rev) if n is None else img.read_image(repo.git, at_step(repo.git, rev, n))


@dataclass(frozen=True)
class RunPlan:
    """What replay and run read from a recorded run's branch."""

    first: str  # the step 0 image: the world a replay starts from
    tip: str
    entries: list[dict]  # the v2 exchanges, in step order
    end: dict | None
    draws: list[dict]  # in arrival order, the end entry's last
    ledger: list[dict]  # the tip's effects
    fork_step: int | None  # N when the tip is a fork's step N (fork_at_step)
    start_image: str  # the image whose world a run starts in: the fork's step N, else step 0


def run_plan(git, rev: str) -> RunPlan:
    """The recorded run REV ends; UsageError when REV is no recorded run, DataError when its tape is damaged."""
    tip = img.read_image(git, refs.resolve(git, rev))
    verify.check_use(git, tip.id, rev)
    stored = tape_mod.read(git, tip.tree)
    if not stored or not all(exchange.is_v2(e) for e in stored):
        raise UsageError(f"'{rev}' is not a recorded run (its image has no tape of format v2)")
    parsed = [exchange.parse_entry(e, f"image {tip.short}: trace/tape entry {i + 1}") for i, e in enumerate(stored)]
    entries, end = exchange.exchanges(parsed), exchange.end(parsed)
    try:
        first = at_step(git, tip.id, 0)
    except UnknownRevision:
        raise UsageError(f"'{rev}' is not a recorded run (no step 0 image on its line)") from None
    draws = [d for e in sorted(entries, key=lambda e: e["arrival"]) for d in e.get("draws", [])]
    draws += end.get("draws", []) if end else []
    data = img.read_file(git, tip.tree, img.EFFECTS_LEDGER)
    ledger = effects_mod.decode(data) if data else []
    fork_step = step_of(tip) if tip.trailer(FORKED_TRAILER) else None
    return RunPlan(first, tip.id, entries, end, draws, ledger, fork_step, tip.id if fork_step else first)


@dataclass(frozen=True)
class StepToken:
    """What ``arrived`` saw for one request: the world then, and the draws and effects before it."""

    arrival: int
    world: object  # the Capture of the sandbox when the request arrived
    draws: list[dict] = field(default_factory=list)
    effects: list[dict] = field(default_factory=list)


class _StepTape:
    """The run's tape as a snapshot's tape input, packed as it grows (docs/record.md, "Step
    images"): each full chunk of entries is packed into one blob (``tapechunk``) when it fills and
    only referenced after; the unfinished last chunk's entries are loose blobs, each written once,
    when it is added. A step writes only the tape's tree: one line per full chunk and one per entry
    of the last chunk, kept as bytes, so neither its cost nor the memory it holds grows with the
    run (one loose blob per entry and the whole tree rewritten at every step grew both)."""

    name = tape_mod.NAME

    def __init__(self, git):
        self.writer = TreeWriter(git)
        self.count = 0
        self.chunks = bytearray()  # the tree lines of the full chunks
        self.tail: list[bytes] = []  # the last chunk's entries
        self.tail_lines = bytearray()  # ... and their tree lines
        self.base = None  # the columns of the first chunk, which later chunks are compressed against

    def add(self, data: bytes) -> None:
        if not tapechunk.fits(len(self.tail), sum(map(len, self.tail)), len(data)):
            self.pack()
        name = tape_mod.entry_name(self.count, data)
        self.tail_lines += self._line(name, self.writer.write_blob(data))
        self.tail.append(data)
        self.count += 1
        if len(self.tail) == tapechunk.CHUNK_ENTRIES:
            self.pack()

    def pack(self) -> None:
        """Close the last chunk: its entries go into one packed blob (the run's end packs its last one)."""
        if self.tail:
            name, blob, gives = tapechunk.pack(self.count - len(self.tail), self.tail, self.base)
            self.base = self.base or gives
            self.chunks += self._line(name, self.writer.write_blob(blob))
            self.tail, self.tail_lines = [], bytearray()

    @staticmethod
    def _line(name: bytes, oid: bytes) -> bytes:
        return b"%o %s\x00%s" % (MODE_FILE, name, oid)

    def write(self, repo, edit: img.TreeEdit, parent) -> dict:
        tree = edit.writer.write_encoded(bytes(self.chunks + self.tail_lines))  # in tape order: git's order
        edit.put_tree(tape_mod.PATH, tree.hex())
        return tape_mod.summary(self.count)


def check_target(name: str) -> str:
    """A run's branch name, or a full ref under ``refs/pf/`` (a blame trial's); UsageError otherwise."""
    if name.startswith(refs.ROOT):
        if not pygit2.reference_is_valid_name(name) or name == refs.HEAD or name.startswith(refs.HEADS):
            raise UsageError(f"'{name}' is not a valid ref name for a run")
        return name
    return refs.check_name(name)


def target_tip(git, name: str) -> str | None:
    """The tip of a run's branch or full ref (``check_target``), or None."""
    return refs.ref_tip(git, name) if name.startswith(refs.ROOT) else refs.branch_tip(git, name)


class StepWriter:
    """Writes a run's step images on ``branch`` (or a full ref under ``refs/pf/``) as the proxy sees
    exchanges complete. Thread-safe."""

    def __init__(self, repo, branch: str, fs_root: Path | None, *, parent: str | None = None, start_step: int = 0,
                 tape: list[dict] = (), messages=None, ledger=None, ignore=(), no_redact=frozenset()):
        self.repo = repo
        self.branch = check_target(branch)
        self.keep = frozenset(no_redact)
        self._lock = threading.Lock()
        self._packs = RunPackWriter(repo.git)
        bound_git_memory()
        self.failures: list[str] = []  # one line per step (or world) that could not be written
        self.lost = 0  # step images that could not be written
        self._tip = parent
        self._parent_image = img.read_image(repo.git, parent) if parent else None
        self._world = LiveWorld(repo, Path(fs_root), tuple(ignore)) if fs_root is not None else None
        self._name = self._world.name if self._world else branch
        with packing(repo.git, self._packs):
            self._fixed = None if self._world else inherited(repo, self._parent_image)
        self._last_world = self._fixed
        self.step = start_step
        self._tape = _StepTape(repo.git)
        with packing(repo.git, self._packs):  # queued: written with the first step
            for name, data in tape_mod.encode(list(tape), self.keep) if tape else []:
                self._tape.add(data)
        self._messages = list(messages or [])
        self._ledger = effects_mod.chain(list(ledger or []), "ledger")
        self._pending: list[tuple[int, list[dict]]] = []  # effects seen at each arrival, not yet in an image
        self._flight: set[int] = set()  # arrivals neither completed nor failed yet
        self._carried: dict[int, list[dict]] = {}  # failed arrival -> the draws made before it
        self.bad_effects = 0
        runs = repo.git_dir / "pf" / "runs"
        runs.mkdir(parents=True, exist_ok=True)
        self.channel = runs / f"{os.getpid()}-{next(_runs)}-{os.urandom(4).hex()}.jsonl"
        self.channel.write_bytes(b"")
        self._reader = ChannelReader(self.channel)

    # -- the run's images ------------------------------------------------
    def start(self, trailers: tuple = ()) -> img.ImageInfo:
        """Step 0: the world before the child runs (not written for a run going on from a fork);
        ``trailers``: more of them (where the sandbox and the child's cwd were, ``stepworld.place``)."""
        with self._lock:
            if self._tip is not None:
                return self._parent_image
            if target_tip(self.repo.git, self.branch) is not None:
                raise UsageError(f"branch '{self.branch}' already exists; a recorded run needs a new branch")
            return self._write(self._capture(), f"run start: {self._name}", [(STEP_TRAILER, "0"), *trailers])

    def arrived(self, arrival: int) -> StepToken:
        """A request arrived (before it is forwarded): the world now, and the draws and effects since the last one."""
        with self._lock:
            draws, effects = self._events()
            self._pending.append((arrival, effects))
            self._flight.add(arrival)
            try:
                world = self._capture()
            except STORAGE_ERRORS as e:  # the step keeps the world captured before
                self._failed(f"world at request {arrival} not captured: {_reason(e)}")
                world = self._last_world
            return StepToken(arrival, world, draws, effects)

    def failed(self, token: StepToken) -> None:
        """Request ``token.arrival`` got no response (its upstream is down): no step, but the draws
        made before it go with the next exchange to complete after it (or the ``end`` entry), so a
        replay still has them all, in order."""
        with self._lock:
            if token.arrival in self._flight:
                self._flight.discard(token.arrival)
                self._carried[token.arrival] = list(token.draws)

    def _carried_before(self, arrival: int | None) -> list[dict]:
        """The draws of failed requests that go before ``arrival``'s (None: the end): those of
        each failed one before it with no request in flight between them."""
        take = [k for k in sorted(self._carried)
                if arrival is None or (k < arrival and not any(k < f < arrival for f in self._flight))]
        return [d for k in take for d in self._carried.pop(k)]

    def completed(self, token: StepToken, entry: dict) -> img.ImageInfo:
        """Exchange ``entry`` (a v2 exchange without ``step`` / ``draws``) ended: write its step image."""
        with self._lock:
            self._flight.discard(token.arrival)
            self.step += 1
            entry = dict(entry, step=self.step, draws=self._carried_before(token.arrival) + list(token.draws))
            data = self._append(entry)
            stored = json.loads(data)  # the entry as the image holds it, secrets redacted
            self._messages = wire.messages(stored) or self._messages
            self._take_effects(token.arrival)
            subject = f"step {self.step}: {entry.get('api', 'other')} {entry.get('response', {}).get('status', '')}"
            return self._write_step(token.world, subject, [(STEP_TRAILER, str(self.step))], f"step {self.step}")

    def finish(self, exit_code: int) -> img.ImageInfo:
        """The child ended: the ``end`` entry (the draws and effects after the last request) and the final image."""
        with self._lock:
            draws, effects = self._events()
            draws = self._carried_before(None) + draws
            self._pending.append((MAX_STEP, effects))
            self._take_effects(MAX_STEP)
            self._append({"v": 2, "kind": "end", "step": self.step, "draws": draws, "exit": exit_code}, last=True)
            try:
                world = self._capture()
            except STORAGE_ERRORS as e:
                self._failed(f"world at the end not captured: {_reason(e)}")
                world = self._last_world
            trailers = [(STEP_TRAILER, str(self.step)), (RUN_END_TRAILER, str(exit_code))]
            lost = self.lost  # the end image counts the steps lost before it
            trailers += [(LOST_TRAILER, str(lost))] if lost else []
            info = self._write_step(world, f"run end: exit {exit_code}", trailers, "the run's end image")
            with packing(self.repo.git, self._packs):
                self._packs.consolidate()
            return info if info is not None else img.read_image(self.repo.git, self._tip)

    def close(self) -> None:
        """Remove the channel file and keep the sandbox's stat cache for the next snapshot."""
        self.channel.unlink(missing_ok=True)
        if self._world is not None:
            try:
                self._world.save()
            except OSError as e:  # only the next snapshot's speed depends on it
                self._failed(f"stat cache not saved: {_reason(e)}")

    # -- helpers ----------------------------------------------------------
    def _capture(self):
        if self._world is None:
            return self._fixed
        with packing(self.repo.git, self._packs):  # written with the next step's pack
            cap = self._world.capture(self.repo, None)
        self._world.done(cap)
        self._last_world = cap
        return cap

    def _write_step(self, cap, subject: str, trailers: list[tuple[str, str]], what: str) -> img.ImageInfo | None:
        """``_write``, tried again after a storage failure; None (and one line in ``failures``) when
        it could not be written: the branch stays at the last image written. Once a step was lost
        each later one is tried once, without pauses (it writes what the lost ones queued too), so a
        full disk does not slow the agent's exchanges."""
        for pause in (*(() if self.lost else RETRY_S), None):
            try:
                return self._write(cap, subject, trailers)
            except STORAGE_ERRORS as e:
                if pause is None:
                    self._failed(f"{what} not written: {_reason(e)}")
                    self.lost += 1
                    return None
                time.sleep(pause)

    def _failed(self, line: str) -> None:
        """Note a storage failure: one line on stderr (the first only: a full disk fails every step)."""
        if not self.failures:
            sys.stderr.write(f"git pf: warning: {line} (the agent goes on; see the run's report)\n")
        self.failures.append(line)

    def _events(self) -> tuple[list[dict], list[dict]]:
        """The draws and effects the child wrote to the channel since the last call."""
        events = self._reader.new_events()
        return channel.draws(events), channel.effects(events)

    def _take_effects(self, upto: int) -> None:
        """Move the effects seen at arrivals up to ``upto`` into the ledger (so it only grows)."""
        while self._pending and self._pending[0][0] <= upto:
            for entry in self._pending.pop(0)[1]:
                try:  # redacted here too: the channel is the child's to write (git_pf.tool redacts first)
                    self._ledger = effects_mod.chain(self._ledger + [secrets.redact_json(entry, self.keep)], "effect")
                except InputFormatError:  # not a ledger entry: the child's tool wrapper is broken
                    self.bad_effects += 1

    def _append(self, entry: dict, last: bool = False) -> bytes:
        """Add one entry to the tape (encoded once, secrets redacted); its stored bytes. ``last``:
        the run's end, whose image holds the tape packed whole."""
        data = tape_mod.encode([entry], self.keep)[0][1]
        with packing(self.repo.git, self._packs):  # queued: written with the step's pack, never loose
            self._tape.add(data)
            if last:
                self._tape.pack()
        return data

    def _write(self, cap, subject: str, trailers: list[tuple[str, str]]) -> img.ImageInfo:
        full = self.branch if self.branch.startswith(refs.ROOT) else None
        req = SnapshotRequest(Path("."), branch=None if full else self.branch, ref=full, messages=list(self._messages),
                              effects=list(self._ledger), message=subject, allow_empty=True, layers=(self._tape,),
                              world=Given(cap, self._name), parent=self._tip, trailers=tuple(trailers))
        with packing(self.repo.git, self._packs):
            result = take(self.repo, req)
        self._tip = result.image.id
        return result.image


GIT_MAPPED_BYTES = 8 << 20  # libgit2's mapped pack windows: a run's merged packs come and go


def bound_git_memory() -> None:
    """Bound what libgit2 keeps in this long-lived process, so a recording's memory stays flat
    however long it runs (docs/record.md, "Step images"): no object cache, and at most 8 MiB of
    mapped pack windows (by default 8 GiB, windows of packs a merge removed included). What a step
    reads back is mostly the step before it (its commit, manifest and the trees it edits), once and
    never again, so libgit2's object cache (256 MiB by default, counted in object bytes, not in
    what an entry costs) only filled with them: the recorder's heap grew about 1.2 MiB per 1,000
    steps at 16 MiB, and until about step 5,000 at 1 MiB. Process-wide, as libgit2's settings are."""
    settings = pygit2.settings
    settings.enable_caching(False)
    settings.mwindow_mapped_limit = min(settings.mwindow_mapped_limit, GIT_MAPPED_BYTES)


def _reason(e: Exception) -> str:
    return str(e) if isinstance(e, (WriteFailed, SigningFailed)) else f"{type(e).__name__}: {getattr(e, 'strerror', None) or e}"
