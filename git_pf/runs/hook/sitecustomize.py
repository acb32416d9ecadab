"""git-pf's in-process seam in a recorded, replayed or run-on Python child (docs/record.md, "Draws").

Loaded as ``sitecustomize`` from the directory ``git_pf.runs.inject.child_env`` puts first on
PYTHONPATH. With ``GIT_PF_MODE`` unset it does nothing but chain to the next ``sitecustomize``
on the path. Otherwise it wraps the sources of nondeterminism: ``time.time`` / ``time_ns``,
``datetime.datetime.now`` / ``utcnow`` / ``today``, ``uuid.uuid1`` / ``uuid4``, ``os.urandom``
(and so ``secrets`` and ``random.SystemRandom``) and the seeding of every ``random.Random`` seeded
from the system, the global generator included (so every ``random`` function is covered).
Record appends each draw to the channel file, one ``os.write`` per line before the call returns;
replay serves the replay file's draws in order and ends the process with exit 86 on a divergence;
run serves them and goes live past them. ``git_pf.runs.tools`` shares the run through ``run()``.
Random bytes (``os.urandom``, ``uuid.uuid4``, a system seed of ``random``) come from the run's
stream: SHAKE-256 keyed by 32 bytes from the OS, drawn (and recorded as a ``git_pf.seed`` draw)
before the first of them, so a draw records its size, not its bytes; replay keys the same stream
from the recorded seed, and a run going live draws a new seed.

The draws are the agent's: only the process git-pf started (its parent's pid is
``GIT_PF_PARENT``) owns the run and records; a process it spawns (a tool, a Python child of a
non-Python agent) inherits ``GIT_PF_OWNER`` or has another parent, and its draws stay live and
unrecorded. Standard library only and self-contained: the child may be a Python without git-pf.
Touches nothing but the channel file, the wrapped functions and ``GIT_PF_OWNER`` in the environment.
"""
import contextvars
import os
import sys
import threading

DIVERGED_EXIT = 86
ALIAS = "_git_pf_hook"  # the name git_pf.runs.tools finds this module by, however it was loaded
MODES = ("record", "replay", "run")

_state = {"run": None, "started": False}
# Set while a git_pf.tool body runs: its draws are live and unrecorded, since replay answers the
# call from the ledger without running the body (a task-local flag, so other asyncio tasks still draw).
IN_TOOL = contextvars.ContextVar("git_pf_in_tool", default=False)


def _any(value):
    return True


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_str(value):
    return isinstance(value, str)


def _quoted(value):
    return '"%s"' % value  # hex digits and uuids only: nothing to escape


SEED_FN = "git_pf.seed"  # the draw that keys the run's stream: 32 bytes from the OS, as hex
_SEED_BYTES = 32
_DOMAIN = b"git-pf draw stream\0"


class Run:
    """One process's part in a run: the channel, the draws to serve, the ledger to answer from."""

    def __init__(self, mode, channel, replay):
        self.mode = mode
        self.fd = os.open(channel, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        self.lock = threading.Lock()
        self.local = threading.local()
        self.active = True
        self.draws = replay.get("draws") or []
        self.effects = [e for e in replay.get("effects") or [] if isinstance(e, dict)]
        blobs = replay.get("blobs")
        self.blobs = blobs if isinstance(blobs, dict) else {}  # what answered tool calls wrote (git_pf.runs.tools)
        self.allow_effects = bool(replay.get("allow_effects"))
        self.served = 0  # draws served from the replay file
        self.recorded = 0  # live draws written to the channel
        self.live = mode == "record" or not self.draws and mode == "run"
        self.effects_used = set()  # indices of ledger entries answered (git_pf.runs.tools)
        self.tool_calls = 0
        self.unwritten = b""  # channel bytes a full disk kept back
        self.urandom = os.urandom  # the OS's, taken before the hook wraps it: the seed's source
        self.key = None  # the stream's seed: drawn before the first streamed draw, or served
        self.taken = 0  # streamed draws since the seed
        self.keyed_hash = None

    def take(self, size):
        """The next ``size`` bytes of the run's stream (under the lock): SHAKE-256 of the seed and the
        draw's number; a live run with no seed yet draws one from the OS and records it first."""
        if self.key is None:
            self.keyed(self.urandom(_SEED_BYTES))
            self.write('{"t":"draw","fn":"%s","v":"%s"}\n' % (SEED_FN, self.key.hex()))
            self.recorded += 1
        h = self.keyed_hash.copy()
        h.update(self.taken.to_bytes(8, "big"))
        data = h.digest(size)
        self.taken += 1
        return data

    def keyed(self, key):
        """Start the stream of seed ``key`` (the hash of its fixed prefix is kept, and copied per draw)."""
        import hashlib
        self.key, self.taken, self.keyed_hash = key, 0, hashlib.shake_256(_DOMAIN + key)

    def write(self, line):
        """Append to the channel; what a full disk keeps back goes first at the next write (the
        agent never sees the error; past 16 MiB kept back it is dropped: the run reports lost steps)."""
        data = self.unwritten + line.encode("utf-8")
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except OSError:
            pass
        self.unwritten = data if len(data) < 16 << 20 else b""

    def emit(self, event):
        import json
        self.write(json.dumps(event, sort_keys=True, separators=(",", ":"), ensure_ascii=True) + "\n")

    def draw(self, fn, call, enc, dec, check=_any, stream=None):
        """The value of one draw: live (and recorded) or served from the replay file. ``stream``:
        ``(size, make, recorded)`` for a draw whose bytes come from the run's stream: ``make``
        builds the value from ``size`` bytes of it, ``recorded`` is the JSON text recorded for it."""
        local = self.local
        if not self.active or getattr(local, "busy", False) or IN_TOOL.get():
            return call()  # a draw inside a draw (uuid4 reads os.urandom) or a tool, or a forked child
        local.busy = True
        try:
            with self.lock:
                if not self.live:
                    served = self._serve(fn, dec, check, stream)
                    if served is not _LIVE:
                        return served
                if stream is None:
                    value = call()
                    text = enc(value)
                else:
                    value, text = stream[1](self.take(stream[0])), stream[2]
                self.write('{"t":"draw","fn":"%s","v":%s}\n' % (fn, text))
                self.recorded += 1
                return value
        finally:
            local.busy = False

    def _live(self):
        """Run mode past the recording: live from here, on a stream of its own (never the
        recorded stream's next bytes, which the run's other forks would draw too)."""
        self.live = True
        self.key = None
        return _LIVE

    def _serve(self, fn, dec, check, stream):
        while self.served < len(self.draws) and isinstance(self.draws[self.served], dict) \
                and self.draws[self.served].get("fn") == SEED_FN:
            self._key(self.draws[self.served].get("v"))
        i = self.served
        if i >= len(self.draws):
            if self.mode == "run":
                return self._live()
            self.diverge("draw", i, None, {"fn": fn},
                         f"draw {i + 1}: the child called {fn} past the {len(self.draws)} recorded draws")
        want = self.draws[i]
        same = isinstance(want, dict) and want.get("fn") == fn
        v = want.get("v") if same else None
        streamed = same and stream is not None and (v is None if stream[2] == "null" else _is_int(v))
        fits = v in (None, stream[0]) if streamed else same and check(v)  # a streamed os.urandom: its size
        if not fits or streamed and self.key is None:
            if self.mode == "run":
                return self._live()
            had = want.get("fn") if isinstance(want, dict) else want
            if fits:
                detail = f"the recorded {fn} draw has no seed before it"
            else:
                detail = f"the child called {fn} where the recording has {had}" + (f" of {v} bytes" if streamed else "")
            self.diverge("draw", i, want, {"fn": fn}, f"draw {i + 1}: {detail}")
        try:
            value = stream[1](self.take(stream[0])) if streamed else dec(v)
        except (TypeError, ValueError) as e:
            self.diverge("draw", i, want, {"fn": fn}, f"draw {i + 1}: the recorded {fn} value is malformed ({e})")
        self.served += 1
        return value

    def _key(self, v):
        """Serve a recorded seed: the stream's draws from here on are keyed by it."""
        i = self.served
        try:
            key = bytes.fromhex(v)
        except (TypeError, ValueError):
            key = b""
        if len(key) != _SEED_BYTES:
            self.diverge("draw", i, self.draws[i], None, f"draw {i + 1}: the recorded seed is malformed")
        self.keyed(key)
        self.served += 1

    def diverge(self, what, index, expected, got, detail):
        """Record a divergence and end the process with exit 86 (no cleanup runs)."""
        self.emit({"t": "diverged", "what": what, "index": index, "expected": expected, "got": got,
                   "detail": detail})
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            os.write(2, f"git-pf: replay diverged: {detail}\n".encode("utf-8", "replace"))
        finally:
            os._exit(DIVERGED_EXIT)

    def consumed(self):
        if self.active:
            self.emit({"t": "consumed", "draws": self.served, "of": len(self.draws), "recorded": self.recorded,
                       "effects": len(self.effects_used), "effects_of": len(self.effects)})


_LIVE = object()


def _fail(message):
    os.write(2, f"git-pf: {message}\n".encode("utf-8", "replace"))
    os._exit(DIVERGED_EXIT)


def run():
    """The active run of this process, started on first use; None outside a run (no
    ``GIT_PF_MODE``, or a process started by the run's child: the first process owns the run)."""
    if not _state["started"]:
        _start(patch=False)
    return _state["run"]


def _start(patch):
    _state["started"] = True
    mode = os.environ.get("GIT_PF_MODE")
    if not mode:
        return
    owner = os.environ.get("GIT_PF_OWNER")
    if owner and owner != str(os.getpid()):
        return
    parent = os.environ.get("GIT_PF_PARENT")
    if not owner and parent and parent != str(os.getppid()):
        return  # not the agent's own process: a tool it spawned (the agent may be no Python at all)
    os.environ["GIT_PF_OWNER"] = str(os.getpid())
    channel = os.environ.get("GIT_PF_CHANNEL")
    if mode not in MODES or not channel:
        _fail(f"GIT_PF_MODE must be one of {'|'.join(MODES)} with GIT_PF_CHANNEL set")
    replay = {}
    path = os.environ.get("GIT_PF_REPLAY")
    if path and mode != "record":
        import json
        try:
            with open(path, "rb") as f:
                replay = json.load(f)
        except (OSError, ValueError) as e:
            _fail(f"cannot read the replay file: {e}")
        if not isinstance(replay, dict) or not isinstance(replay.get("draws", []), list) \
                or not isinstance(replay.get("effects", []), list):
            _fail("the replay file is not a git-pf replay file")
    try:
        r = Run(mode, channel, replay)
    except OSError as e:
        _fail(f"cannot open the run's channel: {e}")
    _state["run"] = r
    sys.modules.setdefault(ALIAS, sys.modules[__name__])

    def _forked():
        r.active = False  # a forked child neither records nor consumes: its parent does

    os.register_at_fork(after_in_child=_forked)
    import atexit
    atexit.register(r.consumed)
    if patch:
        _patch(r)


def _patch(r):
    import time
    real_time, real_time_ns, real_urandom = time.time, time.time_ns, os.urandom
    time.time = lambda: r.draw("time.time", real_time, repr, float, _is_number)
    time.time_ns = lambda: r.draw("time.time_ns", real_time_ns, str, int, _is_int)

    def urandom(size):
        n = size.__index__() if hasattr(size, "__index__") else -1
        if n < 0:
            return real_urandom(size)  # the error Python gives (a negative size, or none), and no draw
        size = n
        return r.draw("os.urandom", lambda: real_urandom(size), lambda b: _quoted(b.hex()), bytes.fromhex,
                      lambda v: isinstance(v, str) and len(v) == 2 * size, (size, bytes, str(size)))

    os.urandom = urandom
    _patch_random(r, real_urandom)
    _patch_uuid(r)
    _patch_datetime(r, real_time_ns)


def _patch_random(r, real_urandom):
    import random
    real_seed = random.Random.seed

    def seed(self, a=None, version=2):
        if a is None:
            a = r.draw("random.seed", lambda: int.from_bytes(real_urandom(32), "big"), str, int, _is_int,
                       (32, lambda b: int.from_bytes(b, "big"), "null"))
        return real_seed(self, a, version)

    random.Random.seed = seed
    random._urandom = os.urandom  # SystemRandom (and secrets) read it under this name
    random.seed = random._inst.seed
    random.seed()


def _patch_uuid(r):
    import uuid
    real1, real4 = uuid.uuid1, uuid.uuid4
    uuid.uuid1 = lambda node=None, clock_seq=None: r.draw(
        "uuid.uuid1", lambda: real1(node, clock_seq), lambda u: _quoted(u), uuid.UUID, _is_str)
    uuid.uuid4 = lambda: r.draw("uuid.uuid4", real4, lambda u: _quoted(u), uuid.UUID, _is_str,
                                (16, lambda b: uuid.UUID(bytes=b, version=4), "null"))


def _patch_datetime(r, real_time_ns):
    import datetime as dt
    real = dt.datetime

    def micros(fn):
        return r.draw(fn, lambda: real_time_ns() // 1000, str, int, _is_int)

    class _Meta(type):  # datetimes made by C code (real ones) still pass isinstance checks
        def __instancecheck__(cls, obj):
            return isinstance(obj, real)

        def __subclasscheck__(cls, sub):
            return issubclass(sub, real)

    class datetime(real, metaclass=_Meta):
        @classmethod
        def now(cls, tz=None):
            s, us = divmod(micros("datetime.now"), 1_000_000)
            return cls.fromtimestamp(s, tz).replace(microsecond=us)

        @classmethod
        def utcnow(cls):
            s, us = divmod(micros("datetime.utcnow"), 1_000_000)
            return cls.fromtimestamp(s, dt.timezone.utc).replace(microsecond=us, tzinfo=None)

        @classmethod
        def today(cls):
            s, us = divmod(micros("datetime.today"), 1_000_000)
            return cls.fromtimestamp(s).replace(microsecond=us)

    datetime.__module__, datetime.__qualname__ = "datetime", "datetime"
    dt.datetime = datetime


def _chain():
    """Run the next ``sitecustomize`` on the path, the one this module stands in front of."""
    import importlib.machinery
    import importlib.util
    here = os.path.dirname(os.path.abspath(__file__))
    paths = [os.path.abspath(p or os.curdir) for p in sys.path]
    rest = sys.path[paths.index(here) + 1:] if here in paths else [p for p, a in zip(sys.path, paths) if a != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


if __name__ == "sitecustomize":
    try:
        _start(patch=True)
    finally:
        _chain()
else:
    sys.modules.setdefault(ALIAS, sys.modules[__name__])
