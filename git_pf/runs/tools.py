"""Tool calls with side effects in a run: ``git_pf.tool`` (docs/record.md, "Tools").

A decorated function, or a ``with git_pf.tool(...) as call`` block, is one tool call. Recording,
its body runs and its args and result go to the run's channel as an ``effect`` event (the
effects ledger of the step images). Replaying, or in a fork's prefix, the recorded result of the
next ledger entry of that tool with the same arguments is returned and the body never runs; an
irreversible call the ledger lacks ends a replay (exit 86) unless effects are allowed. A call's
world change goes with its ledger entry (``world``: each path it wrote, as the id of a git blob,
or deleted; a look at ``$GIT_PF_WORLD`` before and after the body, kept cheap by a directory
watcher, ``fswatch``), and a call answered from
the ledger makes that change again from the blobs in the replay file, so an agent that reads back
what the tool wrote finds it; a call that ran while another was running cannot be told apart
(``{"unknown": "concurrent calls"}``) and is left to the world check. Outside a run the body just
runs. Runs inside the agent's process: standard library, canonjson, secrets and fswatch only
(no repository, no pygit2); the run itself is the hook's (``hook.sitecustomize``).
"""
from __future__ import annotations

import functools
import hashlib
import inspect
import json
import os
import sys
import threading
import time

from ..core import canonjson, secrets
from ..core.errors import UsageError

CLASSES = ("pure", "idempotent", "irreversible")
_MIN_HIDDEN = 4  # a redacted argument shorter than this is not looked for in the result
_counts: dict[tuple[str, str], int] = {}
_counts_lock = threading.Lock()
_flight = {"running": 0, "epoch": 0}  # live tool bodies running now; bumped each time one starts
_flight_lock = threading.Lock()
CONCURRENT = {"unknown": "concurrent calls"}


def _world_root() -> str | None:
    root = os.environ.get("GIT_PF_WORLD")
    return root if root and os.path.isdir(root) else None


def _world_state(root: str) -> dict[str, tuple]:
    """Every path under ``root`` (relative, ``/``-separated) and what its stat says of its content."""
    out: dict[str, tuple] = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        entries: dict[str, tuple] = {}
        _scan_dir(root, rel, entries)
        stack.extend(path for path, state in entries.items() if state == ("dir",))
        out.update(entries)
    return out


def _scan_dir(root: str, rel: str, into: dict) -> None:
    """The entries directly in ``rel`` into ``into`` (a directory's own entries are looked at apart)."""
    try:
        with os.scandir(os.path.join(root, rel) if rel else root) as it:
            for e in it:
                path = f"{rel}/{e.name}" if rel else e.name
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                into[path] = ("dir",) if e.is_dir(follow_symlinks=False) else \
                    (st.st_mode, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)
    except OSError:
        pass


class _WorldWatch:
    """The world's entries as tool calls see them: walked whole once, then kept up to date by
    looking again only at the directories a watcher (``fswatch.DirWatch``) saw change."""

    def __init__(self, root: str):
        from ..core.fswatch import DirWatch

        self.root = root
        self.watch = DirWatch(os.fsencode(os.path.realpath(root)))
        self.state = _world_state(root)
        self.lock = threading.Lock()

    def look(self) -> dict[str, tuple]:
        with self.lock:
            dirty = self.watch.changed()
            if dirty is None:  # the watcher cannot say: walk everything
                self.state = _world_state(self.root)
            else:
                for rel in sorted(os.fsdecode(d) for d in dirty):
                    self._refresh(rel)
            return dict(self.state)

    def _refresh(self, rel: str) -> None:
        fresh: dict[str, tuple] = {}
        if rel == "" or self.state.get(rel) == ("dir",) or os.path.isdir(os.path.join(self.root, rel)):
            _scan_dir(self.root, rel, fresh)
        prefix = f"{rel}/" if rel else ""
        gone = [k for k in self.state if k.startswith(prefix) and "/" not in k[len(prefix):] and k not in fresh]
        for k in gone:  # a directory gone takes everything below it along
            if self.state.pop(k) == ("dir",):
                for below in [b for b in self.state if b.startswith(k + "/")]:
                    del self.state[below]
        for k, v in fresh.items():
            if v == ("dir",) and k not in self.state:  # a directory moved in: what it holds
                self.state.update(_world_state_under(self.root, k))
            self.state[k] = v


def _world_state_under(root: str, rel: str) -> dict[str, tuple]:
    return {f"{rel}/{k}": v for k, v in _world_state(os.path.join(root, rel)).items()}


_watches: dict[str, _WorldWatch] = {}
_watches_lock = threading.Lock()


def _look(root: str) -> dict[str, tuple]:
    """The world's entries now (``_WorldWatch``, one per world and process)."""
    with _watches_lock:
        watch = _watches.get(root)
        if watch is None:
            watch = _watches[root] = _WorldWatch(root)
            return dict(watch.state)
    return watch.look()


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def world_change(root: str, before: dict, after: dict) -> list[dict]:
    """What changed under ``root`` between two ``_world_state``s, in path order: ``{"path", "blob",
    "mode"}`` for a file written (mode ``100644``, ``100755`` or ``120000``, a symlink whose blob is
    its target), ``{"path", "dir": true}`` for a directory made, ``{"path", "deleted": true}``."""
    import stat as stat_mod

    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        if new is None:
            changes.append({"path": path, "deleted": True})
            continue
        if new == ("dir",):
            changes.append({"path": path, "dir": True})
            continue
        full = os.path.join(root, path)
        try:
            if stat_mod.S_ISLNK(new[0]):
                data, mode = os.fsencode(os.readlink(full)), "120000"
            else:
                with open(full, "rb") as f:
                    data = f.read()
                mode = "100755" if new[0] & 0o111 else "100644"
        except OSError:
            continue
        changes.append({"path": path, "blob": _blob_id(data), "mode": mode})
    return changes


def apply_change(root: str, change, blobs: dict) -> bool:
    """Make a recorded world change again under ``root`` from ``blobs`` (blob id -> base64 bytes);
    False when it cannot be (unknown, a blob missing, a path outside the world)."""
    import base64

    if not isinstance(change, list):
        return False
    whole = True
    real = os.path.realpath(root)
    for c in change:
        path = c.get("path") if isinstance(c, dict) else None
        full = os.path.realpath(os.path.join(real, path)) if isinstance(path, str) and path else None
        if full is None or not full.startswith(real + os.sep):
            whole = False
            continue
        try:
            if c.get("deleted"):
                if os.path.isdir(full) and not os.path.islink(full):
                    import shutil
                    shutil.rmtree(full)
                elif os.path.lexists(full):
                    os.unlink(full)
            elif c.get("dir"):
                os.makedirs(full, exist_ok=True)
            elif c.get("blob") in blobs:
                data = base64.b64decode(blobs[c["blob"]])
                os.makedirs(os.path.dirname(full), exist_ok=True)
                if os.path.lexists(full) and (os.path.islink(full) or c.get("mode") == "120000"):
                    os.unlink(full)
                if c.get("mode") == "120000":
                    os.symlink(os.fsdecode(data), full)
                else:
                    with open(full, "wb") as f:
                        f.write(data)
                    os.chmod(full, 0o755 if c.get("mode") == "100755" else 0o644)
            else:
                whole = False
        except OSError:
            whole = False
    return whole


class RecordedToolError(Exception):
    """Raised on replay where the recorded call raised: the message is the recorded error."""


def _hook():
    """The hook module of this process's run (loaded here without the draws' wrappers when the
    child was started with no hook), or None outside a run."""
    hook = sys.modules.get("_git_pf_hook")
    if hook is None and os.environ.get("GIT_PF_MODE"):
        from .hook import sitecustomize as hook
    return hook


def _run():
    hook = _hook()
    return hook.run() if hook is not None else None


def _jsonable(value):
    """``(value as JSON, True)``, or ``(repr(value), False)`` when it is not JSON."""
    try:
        return json.loads(canonjson.dumps(value)), True
    except (TypeError, ValueError):
        return repr(value), False


def _canonical(args) -> str:
    return canonjson.dumps(secrets.redact_json(args))


class Call:
    """One tool call. ``replayed``: the result comes from the ledger and the body must not run;
    otherwise the body sets ``result``."""

    def __init__(self, name: str, side_effect: str, args: dict, key):
        self.name, self.side_effect, self.replayed, self.result = name, side_effect, False, None
        self.args = {k: _jsonable(v)[0] for k, v in args.items()}
        self._key, self._hook, self._token = key, _hook(), None
        self._run = self._hook.run() if self._hook is not None else None
        self._root, self._before, self._epoch = None, None, None

    def start(self) -> Call:
        run = self._run
        if run is None or run.mode == "record":
            return self
        with run.lock:
            index = run.tool_calls
            run.tool_calls += 1
            entry = self._claim(run)
        if entry is not None:
            if entry.get("error") is not None:
                raise RecordedToolError(str(entry["error"]))
            if entry.get("result_repr"):
                run.diverge("effect", index, _brief(entry), self._brief(),
                            f"the recorded result of tool {self.name!r} was not JSON (only its repr was kept), "
                            "so it cannot be replayed")
            self.replayed, self.result = True, entry.get("result")
            root = _world_root()
            if root is not None and "world" in entry:
                apply_change(root, entry.get("world"), getattr(run, "blobs", {}))
        elif run.mode == "replay" and self.side_effect == "irreversible" and not run.allow_effects:
            pending = [e for i, e in enumerate(run.effects) if i not in run.effects_used]
            run.diverge("effect", index, _brief(pending[0]) if pending else None, self._brief(),
                        f"irreversible tool {self.name!r} called with arguments the recorded ledger does not "
                        "hold (replay with --allow-effects to let it run)")
        return self

    def _claim(self, run) -> dict | None:
        want = _canonical(self.args)
        for i, entry in enumerate(run.effects):
            if i not in run.effects_used and entry.get("tool") == self.name and _canonical(entry.get("args")) == want:
                run.effects_used.add(i)
                return entry
        return None

    def _brief(self) -> dict:
        return {"tool": self.name, "args": self.args}

    def body_begins(self) -> None:
        """The body runs from here to ``finish``: its draws are live and unrecorded, since a replay
        answers the call from the ledger without running it."""
        if self._run is not None and not self.replayed:
            self._token = self._hook.IN_TOOL.set(True)
            self._root = _world_root()
            with _flight_lock:
                alone = _flight["running"] == 0
                _flight["running"] += 1
                _flight["epoch"] += 1
                self._epoch = _flight["epoch"] if alone else None
            if self._root is not None:
                self._before = _look(self._root)

    def finish(self, error: BaseException | None) -> None:
        """Record the call (live calls inside a run only)."""
        if self._token is not None:
            self._hook.IN_TOOL.reset(self._token)
            self._token = None
        if self._run is None or self.replayed:
            return
        world = None
        with _flight_lock:
            _flight["running"] -= 1
            alone = self._epoch is not None and self._epoch == _flight["epoch"]
        if self._root is not None and self._before is not None:
            world = world_change(self._root, self._before, _look(self._root)) if alone else CONCURRENT
        result, is_json = _jsonable(self.result)
        if is_json and error is None:
            self.result = result  # what replay will return: the agent sees the same value both times
        args = secrets.redact_json(self.args)
        hidden = _hidden(self.args, args, set())

        def clean(value):  # a secret given in the args stays out of the result, error and key too
            return _scrub(secrets.redact_json(value), hidden)

        entry = {"tool": self.name, "args": args, "result": clean(result),
                 "side_effect_class": self.side_effect, "idempotency_key": clean(self._idempotency_key()),
                 "ts": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(_wall_clock()))}
        if world is not None:
            entry["world"] = world
        if not is_json:
            entry["result_repr"] = True
        if error is not None:
            entry["result"], entry["error"] = None, clean(f"{type(error).__name__}: {error}")
        self._run.emit({"t": "effect", "entry": entry})

    def _idempotency_key(self) -> str:
        if callable(self._key):
            return str(self._key(self.args))
        if self._key is not None:
            return str(self._key)
        digest = hashlib.sha256(_canonical(self.args).encode()).hexdigest()[:16]
        with _counts_lock:
            n = _counts[self.name, digest] = _counts.get((self.name, digest), 0) + 1
        return f"{self.name}:{digest}:{n}"


def _hidden(value, redacted, found: set[str]) -> set[str]:
    """The strings of ``value`` that redaction replaced whole (a password, a key under a secret name)."""
    if isinstance(value, str):
        if redacted == secrets.REDACTED and value != redacted and len(value) >= _MIN_HIDDEN:
            found.add(value)
    elif isinstance(value, dict) and isinstance(redacted, dict):
        for k, v in value.items():
            _hidden(v, redacted.get(k), found)
    elif isinstance(value, list) and isinstance(redacted, list):
        for v, r in zip(value, redacted):
            _hidden(v, r, found)
    return found


def _scrub(value, hidden: set[str]):
    """``value`` with every occurrence of a ``hidden`` string inside its strings redacted."""
    if not hidden:
        return value
    if isinstance(value, str):
        for secret in sorted(hidden, key=len, reverse=True):
            value = value.replace(secret, secrets.REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, hidden) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, hidden) for v in value]
    return value


def _brief(entry: dict) -> dict:
    return {"tool": entry.get("tool"), "args": entry.get("args")}


def _wall_clock() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME)  # not time.time: a ledger timestamp is no draw


class _Tool:
    def __init__(self, name, side_effect, key, args):
        if side_effect not in CLASSES:
            raise UsageError(f"side_effect must be one of {'|'.join(CLASSES)}, not {side_effect!r}")
        self.name, self.side_effect, self.key, self.args = name, side_effect, key, args
        self._calls: list[Call] = []

    def __call__(self, fn):
        name = self.name or fn.__qualname__
        try:
            sig = inspect.signature(fn)
        except (TypeError, ValueError):
            sig = None

        def begin(a, kw):
            if sig is None:
                args = {"args": list(a), "kwargs": kw}
            else:
                bound = sig.bind(*a, **kw)
                bound.apply_defaults()
                args = dict(bound.arguments)
            return Call(name, self.side_effect, args, self.key).start()

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*a, **kw):
                if _run() is None:
                    return await fn(*a, **kw)
                call = begin(a, kw)
                if not call.replayed:
                    call.result = await _finishing(call, fn(*a, **kw))
                return call.result
            return async_wrapper

        @functools.wraps(fn)
        def wrapper(*a, **kw):
            if _run() is None:
                return fn(*a, **kw)
            call = begin(a, kw)
            if not call.replayed:
                call.body_begins()
                try:
                    call.result = fn(*a, **kw)
                except BaseException as e:
                    call.finish(e)
                    raise
                call.finish(None)
            return call.result
        return wrapper

    def __enter__(self) -> Call:
        if self.name is None:
            raise UsageError("a tool used as a context manager needs a name: git_pf.tool('name', ...)")
        call = Call(self.name, self.side_effect, dict(self.args or {}), self.key).start()
        self._calls.append(call)
        call.body_begins()
        return call

    def __exit__(self, exc_type, exc, tb) -> None:
        self._calls.pop().finish(exc)


async def _finishing(call: Call, awaitable):
    call.body_begins()
    try:
        call.result = await awaitable
    except BaseException as e:
        call.finish(e)
        raise
    call.finish(None)
    return call.result


def tool(name=None, *, side_effect: str = "irreversible", key=None, args: dict | None = None):
    """A tool with side effects, as a decorator (``@git_pf.tool(side_effect="idempotent")``, or
    bare ``@git_pf.tool``) or a context manager (``with git_pf.tool("send", args={...}) as call:
    if not call.replayed: call.result = send()``). ``key``: the idempotency key, a string or a
    function of the args (default: tool name, args hash and call count)."""
    if callable(name):
        return _Tool(None, side_effect, key, args)(name)
    return _Tool(name, side_effect, key, args)
