"""``PfSaver``: a LangGraph checkpointer whose checkpoints are git-pf images.

``graph = builder.compile(checkpointer=PfSaver(repo))``: each thread's namespace is a branch
(``lg/<thread>``), each checkpoint an image whose parent is its parent checkpoint's image, so
``get_state_history`` walks git history and a fork (``update_state`` on an older checkpoint)
is a git fork. Values go through a serializer (``self.serde``) and are kept as its
``(type, bytes)`` pairs (``langgraph_store``). A checkpoint may come from a remote, so the default
serializer (``langgraph_serde.StrictSerializer``) decodes only plain data, LangGraph's strict
allow-list and the types given as ``allowed_types``; a value it refuses is a ``DataError`` naming
the image, the thread and the value, and nothing named in it is imported or called. With ``fs_root``, the sandbox directory is
captured into each checkpoint's image (the world layer). The saver runs in the user's process for
as long as the graph does, so what it keeps is bounded: it works on a repository handle of its own
(never the caller's ``pygit2.Repository``), whose libgit2 object cache and open packs it drops
every ``_FRESH_AFTER`` writes, its packs merged as a recording's are; a thread's index holds its
newest checkpoints only (``langgraph_store.Thread``: older ones are read from git when asked
for); and it works on one thread of its own (``_run``); libgit2's process-wide settings are left
as the user has them. Needs the ``langgraph`` extra;
writes git objects, side-store objects (the world) and refs under ``refs/pf/heads/lg/`` only.
"""
from __future__ import annotations

import asyncio
import heapq
import os
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pygit2

try:
    from langgraph.checkpoint.base import (WRITES_IDX_MAP, BaseCheckpointSaver, ChannelVersions, Checkpoint,
                                           CheckpointMetadata, CheckpointTuple, get_checkpoint_metadata,
                                           writes_sort_key)
except ImportError as e:  # pragma: no cover - the extra is missing
    raise ImportError("git_pf.integrations.langgraph needs LangGraph: pip install 'git-pf[langgraph]'") from e

from ..core import canonjson, config as pf_config
from ..image import manifest as img, refs, signing, verify as signing_verify
from ..core.errors import DataError, UsageError, WriteFailed
from ..image.tree import TreeWriter
from ..layers import registry
from ..repo import Repo
from ..ops.snapshot import DirWorld, SnapshotRequest, SnapshotWrite
from ..store.packfile import RunPackWriter, packing
from . import langgraph_serde, langgraph_store as st

AGENT = img.Agent("langgraph")
_RECORDS = 256  # records kept decoded per saver (an image never changes)
_THREADS = 64  # threads' indexes kept per saver (one let go is read from its refs again when used)
# Writes (checkpoints and task writes) after which the saver's repository handle drops libgit2's
# object cache of it and its open packs (``pygit2.Repository.free``): each write reads back the
# objects of the one before, once, and libgit2 (caching on by default, up to 256 MiB a process)
# kept every one of them (docs/integrations.md, "Memory").
_FRESH_AFTER = 64


_on_worker = threading.local()  # ``yes`` on a saver's own thread


def _mark_worker() -> None:
    _on_worker.yes = True


def _configurable(config) -> dict:
    conf = (config or {}).get("configurable") or {}
    if "thread_id" not in conf:
        raise UsageError("a LangGraph config needs configurable.thread_id")
    return conf


def _key(config) -> st.Key:
    conf = _configurable(config)
    return st.Key(str(conf["thread_id"]), conf.get("checkpoint_ns") or "")


def _config(key: st.Key, checkpoint_id: str) -> dict:
    return {"configurable": {"thread_id": key.thread, "checkpoint_ns": key.ns, "checkpoint_id": checkpoint_id}}


class PfSaver(BaseCheckpointSaver[int]):
    """A ``BaseCheckpointSaver`` on a git-pf repository (a ``git_pf.Repo`` or a path, made a
    repository when it is not one). One saver may be shared by threads and coroutines.

    Values are decoded by ``StrictSerializer`` (plain data, LangGraph's message and state types,
    and ``allowed_types``: classes or ``(module, name)`` pairs); ``serde=`` replaces it whole."""

    def __init__(self, repo: Repo | str | os.PathLike, *, fs_root: str | os.PathLike | None = None,
                 serde=None, allowed_types=()) -> None:
        if serde is not None and allowed_types:
            raise UsageError("allowed_types applies to PfSaver's own serializer: give serde= or allowed_types, not both")
        if serde is None:
            try:
                serde = langgraph_serde.StrictSerializer(allowed_types)
            except ValueError as e:
                raise UsageError(str(e), param="allowed_types") from None
        super().__init__(serde=serde)
        # a handle of its own, used under ``_lock`` only: freeing its caches and replacing its object
        # database (the pack merges') never pulls anything from under the caller's own handle
        self.repo = Repo(pygit2.Repository(repo.git.path)) if isinstance(repo, Repo) else Repo.init(repo)[0]
        self.git = self.repo.git
        self._packs = RunPackWriter(self.git)  # a pack per write, merged geometrically (not one per write forever)
        self._writes = 0
        self.fs_root = Path(fs_root) if fs_root is not None else None
        self._world = DirWorld(self.repo, self.fs_root, ()) if self.fs_root is not None else None
        self._lock = threading.RLock()
        self._worker: tuple[int, ThreadPoolExecutor] | None = None  # (pid, one thread): see ``_run``
        self._threads: OrderedDict[st.Key, st.Thread] = OrderedDict()
        self._records: OrderedDict[str, st.Record] = OrderedDict()
        self._early: dict[tuple[st.Key, str], list] = {}  # writes sent before their checkpoint

    def _run(self, work, *args):
        """``work(*args)`` on the saver's own thread, its result or exception returned here.
        LangGraph calls a saver from thread after thread (a pool per ``invoke``), and glibc gives
        each thread a heap (arena) of its own that keeps what it freed: a long session's process
        grew by every one of them. On one thread the saver's allocations reuse one heap."""
        if getattr(_on_worker, "yes", False):
            return work(*args)
        worker = self._worker
        if worker is None or worker[0] != os.getpid():  # first use, or a forked child (no thread there)
            with self._lock:
                if self._worker is None or self._worker[0] != os.getpid():
                    self._worker = (os.getpid(), ThreadPoolExecutor(1, "git-pf-langgraph", _mark_worker))
                worker = self._worker
        return worker[1].submit(work, *args).result()

    # -- reading ----------------------------------------------------------
    def _thread(self, key: st.Key, fresh: bool = False) -> st.Thread:
        """The thread ``key``, re-read from its refs when its branch moved since last seen."""
        cached = self._threads.get(key)
        tip = refs.lookup(self.git, refs.HEADS + key.branch)
        tip = str(tip.target) if tip is not None else None
        if not fresh and cached is not None and cached.local and tip is not None and cached.heads.get(key.branch) == tip:
            self._threads.move_to_end(key)
            return cached
        thread = st.load_thread(self.git, key, st.scan(self.git, key).get(key))
        self._threads[key] = thread
        self._threads.move_to_end(key)
        while len(self._threads) > _THREADS:  # a server of many threads keeps the recent ones' indexes
            self._threads.popitem(last=False)
        return thread

    def _whole(self, key: st.Key) -> st.Thread:
        """The thread ``key`` with every image indexed (to copy or rewrite it; not kept)."""
        return st.load_thread(self.git, key, st.scan(self.git, key).get(key), hot=None)

    def _keys(self, config) -> list[st.Key]:
        if config is None:
            with self._lock:
                return sorted(st.scan(self.git))
        conf = _configurable(config)
        if conf.get("checkpoint_ns") is not None:
            return [st.Key(str(conf["thread_id"]), conf["checkpoint_ns"])]
        with self._lock:
            return sorted(k for k in st.scan(self.git, st.Key(str(conf["thread_id"]))) if k.thread == str(conf["thread_id"]))

    def _record(self, oid: str) -> st.Record:
        rec = self._records.get(oid)
        if rec is None:
            signing_verify.check_use(self.git, oid)  # pf.verify: an untrusted checkpoint is never decoded
            rec = st.read_record(self.git, str(self.git[oid].tree_id))
        self._remember(oid, rec)
        return rec

    def _remember(self, oid: str, rec: st.Record) -> None:
        """Keep ``rec`` decoded, the least recently used beyond ``_RECORDS`` let go."""
        self._records[oid] = rec
        self._records.move_to_end(oid)
        while len(self._records) > _RECORDS:
            self._records.popitem(last=False)

    def _loads(self, typed, key: st.Key, image: st.Image, what: str) -> Any:
        """The value ``typed`` (``what``: which one, in ``image``) decoded by ``self.serde``; one
        ``DataError`` naming the image, the thread and the value when it is refused or malformed."""
        where = f"image {image.oid[:12]} of thread {key.thread!r}{f' (namespace {key.ns!r})' if key.ns else ''}: {what}"
        data = st.load(self.git, typed, where)
        try:
            return self.serde.loads_typed(data)
        except langgraph_serde.Refused as e:
            raise DataError(f"{where} holds {e.what}, which PfSaver does not decode "
                            "(register a type with PfSaver(allowed_types=[...]))") from None
        except Exception as e:  # noqa: BLE001  (the serializer's failure on untrusted bytes, as one line)
            detail = " ".join(str(e).split())[:200] or type(e).__name__
            raise DataError(f"{where} cannot be decoded ({detail})") from None

    def _tuple(self, key: st.Key, image: st.Image) -> CheckpointTuple:
        rec = self._record(image.oid)
        if rec.checkpoint_id != image.checkpoint_id:
            raise UsageError(f"image {image.oid[:12]} holds checkpoint {rec.checkpoint_id!r}, "
                             f"its commit names {image.checkpoint_id!r}")
        checkpoint = self._loads(rec.checkpoint, key, image, "langgraph/checkpoint")
        checkpoint["channel_values"] = {
            ch: self._loads(v, key, image, f"channel {ch!r} (langgraph/values/{st.encode(ch)})")
            for ch, (_, v) in rec.channels.items()}
        writes = sorted(enumerate(rec.writes), key=lambda nw: writes_sort_key(nw[1][3], nw[1][0], nw[1][2]))
        return CheckpointTuple(
            config=_config(key, rec.checkpoint_id), checkpoint=checkpoint,
            metadata=self._loads(rec.metadata, key, image, "langgraph/metadata"),
            parent_config=_config(key, rec.parent_id) if rec.parent_id else None,
            pending_writes=[(task, ch, self._loads(v, key, image, f"write of task {task!r} to channel {ch!r} "
                                                                  f"(langgraph/writes/{n})"))
                            for n, (task, ch, _, _, v) in writes])

    def get_tuple(self, config) -> CheckpointTuple | None:
        return self._run(self._get_tuple, config)

    def _get_tuple(self, config) -> CheckpointTuple | None:
        key, wanted = _key(config), _configurable(config).get("checkpoint_id")
        with self._lock:
            thread = self._thread(key)
            if not wanted:
                latest = thread.latest()
                image = thread.images[latest] if latest else None
            elif (image := st.find(self.git, thread, wanted)) is None:  # written by another process since?
                image = st.find(self.git, self._thread(key, fresh=True), wanted)
            return self._tuple(key, image) if image is not None else None

    def list(self, config, *, filter: dict[str, Any] | None = None, before=None,
             limit: int | None = None) -> Iterator[CheckpointTuple]:
        wanted = _configurable(config).get("checkpoint_id") if config else None
        below = (before or {}).get("configurable", {}).get("checkpoint_id")
        found = heapq.merge(*(self._listed(key, wanted, below) for key in self._run(self._keys, config)),
                            key=lambda x: (x[0], x[1].thread, x[1].ns), reverse=True)
        batch = 1  # tuples made per trip to the saver's thread: 1, 2, 4 ... 64 (a caller may stop early)
        while limit is None or limit > 0:
            tuples = self._run(self._listed_tuples, found, filter, batch if limit is None else min(batch, limit))
            for tup in tuples:
                if limit is not None:
                    limit -= 1
                yield tup
            if not tuples:
                return
            batch = min(2 * batch, 64)

    def _listed_tuples(self, found: Iterator, filter: dict[str, Any] | None, n: int) -> list[CheckpointTuple]:
        """The next ``n`` checkpoints of ``found`` that ``filter`` leaves in, as tuples (fewer at its end)."""
        out = []
        for _, key, image in found:
            with self._lock:
                if filter and not all(self._loads(self._record(image.oid).metadata, key, image,
                                                  "langgraph/metadata").get(k) == v for k, v in filter.items()):
                    continue
                out.append(self._tuple(key, image))
            if len(out) >= n:
                break
        return out

    def _listed(self, key: st.Key, wanted: str | None, below: str | None) -> Iterator[tuple[str, st.Key, st.Image]]:
        """The thread's checkpoints (only ``wanted`` when given; those before ``below``), newest
        first: its index, then, only when the caller reads on, the older ones read from git."""
        with self._lock:
            thread = self._thread(key)
            if wanted:
                image = st.find(self.git, thread, wanted)
                hot, floor = ([(wanted, image)] if image is not None and (not below or wanted < below) else []), None
            else:
                hot = sorted(((cid, i) for cid, i in thread.images.items() if not below or cid < below), reverse=True)
                floor = thread.floor
        yield from ((cid, key, image) for cid, image in hot)
        if floor is not None:
            with self._lock:
                older = st.older(self.git, self._thread(key), min(floor, below) if below else floor)
            yield from ((cid, key, older[cid]) for cid in sorted(older, reverse=True))

    # -- writing ----------------------------------------------------------
    def _commit(self, thread: st.Thread, rec: st.Record, parent: st.Image | None, rev: int, subject: str,
                world: bool, *, also: str | None = None, move: bool = True) -> st.Image:
        """Write the image of ``rec`` on ``parent`` (its tree edited: ``langgraph/``, the manifest, the
        world when captured; ``also``: a second git parent) and, with ``move``, move the thread's heads."""
        git = self.git
        parent_info = img.read_image(git, parent.oid) if parent is not None else None
        edit = img.TreeEdit(git, parent_info.tree if parent_info else None)
        layers = dict(parent_info.manifest.get("layers", {})) if parent_info else {}
        cap = None
        if world and self._world is not None:
            with self.repo.store.batch():
                cap = self._world.capture(self.repo, parent_info)
            snap = SnapshotWrite(self.repo, SnapshotRequest(self.fs_root), cap, edit, parent_info)
            for key, summary in registry.load(registry.get("world").input)(snap).items():
                layers.setdefault(key, {}).update(summary)
        edit.put_tree(st.ROOT, st.write_tree(edit.writer, rec).hex())
        layers["langgraph"] = {"thread": rec.thread_id, "checkpoint": rec.checkpoint_id,
                               "channels": len(rec.channels), "writes": len(rec.writes)}
        edit.put_file(img.MANIFEST, canonjson.encode(img.make_manifest(AGENT, "", layers)))
        trailers = [("Pf-Agent", AGENT.label()), (st.TRAILER_ID, st.encode(rec.checkpoint_id)), (st.TRAILER_REV, str(rev))]
        sig = pf_config.signature(git)
        with packing(git) as pack:  # one pack with what put queued, never a loose object (docs/format.md)
            oid = signing.write_commit(git, sig, sig, img.format_message(subject, trailers), edit.write(),
                                       ([parent.oid] if parent is not None else []) + ([also] if also else []), pack)
            pack.flush()
        image = st.Image(oid, rec.checkpoint_id, rev)
        self._remember(oid, rec)
        wanted = st.desired_heads(thread, image, parent.oid if parent is not None else None)
        thread.add(image, written=True)
        if move:
            st.move_heads(git, thread, wanted, f"langgraph: {subject}")
        if cap is not None:
            self._world.done(cap)
        return image

    def put(self, config, checkpoint: Checkpoint, metadata: CheckpointMetadata,
            new_versions: ChannelVersions) -> dict:
        self._run(self._stored, lambda: self._put(config, checkpoint, metadata, new_versions),
                  f"checkpoint {checkpoint['id']}")
        return _config(_key(config), checkpoint["id"])

    def _put(self, config, checkpoint: Checkpoint, metadata: CheckpointMetadata, new_versions: ChannelVersions) -> None:
        key, conf = _key(config), _configurable(config)
        saved = dict(checkpoint)
        values = saved.pop("channel_values", {}) or {}
        with self._lock:
            thread = self._thread(key)
            parent_id = conf.get("checkpoint_id")
            parent = st.find(self.git, thread, parent_id) if parent_id else None
            inherited = self._record(parent.oid).channels if parent is not None else {}
            writer = TreeWriter(self.git)

            def stored(value) -> tuple[str, bytes]:
                kind, data = self.serde.dumps_typed(value)
                return kind, writer.write_blob(data)

            channels = {}
            for ch, version in checkpoint["channel_versions"].items():
                if ch not in new_versions and ch in inherited and inherited[ch][0] == version:
                    channels[ch] = inherited[ch]
                elif ch in values:
                    channels[ch] = (version, stored(values[ch]))
            meta = get_checkpoint_metadata(config, metadata)
            rec = st.Record(key.thread, key.ns, checkpoint["id"], parent_id, stored(saved), stored(meta), channels)
            for writes in self._early.pop((key, checkpoint["id"]), []):
                rec.writes = self._merged_writes(rec.writes, *writes)
            old = st.find(self.git, thread, checkpoint["id"])
            subject = f"langgraph: {meta.get('source', 'checkpoint')} step {meta.get('step', '?')}"
            self._commit(thread, rec, parent, old.rev + 1 if old else 1, subject, world=True)

    def _stored(self, write, what: str) -> None:
        """Run ``write`` in one pack; storage trouble is one line on stderr, never the graph's failure
        (the checkpoint is not kept: the graph goes on from the one before). Every ``_FRESH_AFTER``
        writes the handle lets go of libgit2's cache and packs (reopened on the next read)."""
        with self._lock:
            try:
                with packing(self.git, self._packs):
                    write()
            except (WriteFailed, OSError, pygit2.GitError) as e:
                sys.stderr.write(f"git pf: langgraph: {what} not written: {e} (the graph goes on)\n")
            self._writes += 1
            if self._writes >= _FRESH_AFTER:
                self._writes = 0
                self.git.free()

    def _merged_writes(self, old: list, writes, task_id: str, task_path: str) -> list:
        """``old`` with ``writes`` added as LangGraph's savers do: a (task, index) already there is
        kept, except the special channels (errors, interrupts, resumes), which are replaced."""
        merged, writer = list(old), TreeWriter(self.git)
        at = {(w[0], w[2]): n for n, w in enumerate(merged)}
        for n, (channel, value) in enumerate(writes):
            idx = WRITES_IDX_MAP.get(channel, n)
            if idx >= 0 and (task_id, idx) in at:
                continue
            kind, data = self.serde.dumps_typed(value)
            entry = (task_id, channel, idx, task_path, (kind, writer.write_blob(data)))
            if (task_id, idx) in at:
                merged[at[(task_id, idx)]] = entry
            else:
                at[(task_id, idx)] = len(merged)
                merged.append(entry)
        return merged

    def put_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        """Writes to a checkpoint make a child image of it. LangGraph may send them before the
        checkpoint itself (its puts run in the background): they wait for its ``put``. It may also
        send them after the next checkpoint's ``put`` (a task's writes and the next checkpoint are
        saved by different background jobs): the head that holds the checkpoint's child then gets
        a new image of its own checkpoint with the writes' image as second parent, so no branch is
        made for them and history only grows."""
        self._run(self._stored, lambda: self._put_writes(config, writes, task_id, task_path), f"writes of task {task_id}")

    def _put_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str) -> None:
        key, cid = _key(config), _configurable(config).get("checkpoint_id")
        with self._lock:
            thread = self._thread(key)
            image = st.find(self.git, thread, cid) if cid else None
            if image is None:
                if not cid:
                    raise UsageError("writes need configurable.checkpoint_id")
                self._early.setdefault((key, cid), []).append((list(writes), task_id, task_path))
                return
            rec = self._record(image.oid)
            merged = self._merged_writes(rec.writes, writes, task_id, task_path)
            if merged == rec.writes:
                return
            subject = f"langgraph: writes of task {task_id} ({', '.join(sorted({c for c, _ in writes}))})"
            below = self._head_above(thread, image)
            written = self._commit(thread, replace(rec, writes=merged), image, image.rev + 1, subject, world=False,
                                   move=below is None)
            if below is not None:
                self._commit(thread, self._record(below.oid), below, below.rev + 1,
                             f"{subject} to the earlier checkpoint {cid}", world=False, also=written.oid)

    def _head_above(self, thread: st.Thread, image: st.Image) -> st.Image | None:
        """The image at the first head (the thread's branch first) that descends from ``image``;
        None when ``image`` is a head itself or no head holds it."""
        if image.oid in thread.heads.values():
            return None
        for _, oid in sorted(thread.heads.items()):
            if oid in thread.by_oid and self.git.descendant_of(oid, image.oid):
                return thread.by_oid[oid]
        return None

    # -- threads ----------------------------------------------------------
    def delete_thread(self, thread_id: str) -> None:
        """Remove the thread's branches (every namespace), and a remote's tracking refs of them."""
        self._run(self._delete_thread, thread_id)

    def _delete_thread(self, thread_id: str) -> None:
        thread_id = str(thread_id)
        with self._lock:
            for key, found in st.scan(self.git, st.Key(thread_id)).items():
                if key.thread == thread_id:
                    st.delete_refs(self.git, [*("refs/pf/heads/" + n for n in found["local"]), *found["remote"]])
                    self._threads.pop(key, None)

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """The target thread gains the source's checkpoints: the same images (a fork, not a copy of data)."""
        self._run(self._copy_thread, source_thread_id, target_thread_id)

    def _copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        with self._lock:
            for key in self._keys({"configurable": {"thread_id": source_thread_id}}):
                src = self._whole(key)
                dst = self._whole(st.Key(str(target_thread_id), key.ns))
                merged = st.merged(dst, src)
                st.move_heads(self.git, dst, st.desired_heads(merged, None, None), "langgraph: copy thread")
                self._threads.pop(dst.key, None)

    def _rewrite(self, keys: list[st.Key], drop) -> None:
        """Rewrite each thread without the checkpoints ``drop(key, image)`` names."""
        for key in keys:
            thread = self._whole(key)
            gone = {cid for cid, image in thread.images.items() if drop(key, image)}
            if gone:
                st.move_heads(self.git, thread, st.rewrite(self.git, thread, gone), "langgraph: rewrite")
                self._threads.pop(key, None)

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """``keep_latest``: each namespace keeps only its latest checkpoint (its image becomes a
        root); ``delete``: the threads are deleted."""
        self._run(self._prune, thread_ids, strategy)

    def _prune(self, thread_ids: Sequence[str], strategy: str) -> None:
        if strategy not in ("keep_latest", "delete"):
            raise UsageError(f"unknown prune strategy {strategy!r} (keep_latest or delete)")
        with self._lock:
            for thread_id in thread_ids:
                if strategy == "delete":
                    self.delete_thread(thread_id)
                    continue
                keys = self._keys({"configurable": {"thread_id": thread_id}})
                self._rewrite(keys, lambda key, image: image.checkpoint_id != self._thread(key).latest())

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Every checkpoint whose metadata names one of ``run_ids`` leaves its thread's history."""
        self._run(self._delete_for_runs, run_ids)

    def _delete_for_runs(self, run_ids: Sequence[str]) -> None:
        runs = set(run_ids)
        with self._lock:
            self._rewrite(self._keys(None), lambda key, image: self._loads(
                self._record(image.oid).metadata, key, image, "langgraph/metadata").get("run_id") in runs)

    # -- async twins --------------------------------------------------------
    async def aget_tuple(self, config) -> CheckpointTuple | None:
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(self, config, *, filter: dict[str, Any] | None = None, before=None,
                    limit: int | None = None) -> AsyncIterator[CheckpointTuple]:
        found = await asyncio.to_thread(lambda: list(self.list(config, filter=filter, before=before, limit=limit)))
        for tup in found:
            yield tup

    async def aput(self, config, checkpoint: Checkpoint, metadata: CheckpointMetadata,
                   new_versions: ChannelVersions) -> dict:
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(self, config, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = "") -> None:
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await asyncio.to_thread(lambda: self.prune(thread_ids, strategy=strategy))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await asyncio.to_thread(self.delete_for_runs, run_ids)
