"""The default adapter: side-store objects as git blobs under the remote's ``refs/pf/objects``.

``refresh`` learns the remote's index with one ``ls-remote`` and, when the
tip is new, a depth-1 fetch (index only, no data). ``upload`` writes the
frames as one pack, adds a data commit and an index commit on top of the
remote's tip, and pushes that ref alone (no hooks, no delta search), in
batches of at most 1 GiB; a push that loses a race rebuilds its index commit
on the new tip and retries. ``download`` wants the blobs by id (protocol v2
allows it), falling back to fetching the whole ref history where the server
refuses; a remote on this machine has its packs linked in instead. The blobs
stay in this repository's object database, listed in its own
``refs/pf/objects`` (``held``), from which the side store reads and verifies
them.
"""
from __future__ import annotations

import os
from pathlib import Path

import pygit2

from ...core.errors import PfError, TransferFailed, UsageError
from ...core.gitdir import common_dir
from ...store.sidestore import SideStore
from .. import gitcmd, held, index as idx, packread, packwrite, scratch
from ..objectstore import ObjectStore
from ..progress import Progress
from ..remotes import Remote

OBJECTS_REF = "refs/pf/objects"
MAX_PUSH_BYTES = 1024 * 1024 * 1024
_RETRIES = 5
_NO_DELTA = ["-c", "pack.window=0", "-c", "pack.depth=0"]


def _max_push_bytes(git: pygit2.Repository, default: int) -> int:
    """``pf.maxPushBytes``: the most new object data one push of refs/pf/objects may carry."""
    try:
        value = git.config.get_int("pf.maxPushBytes")
    except KeyError:
        return default
    except (ValueError, pygit2.GitError):
        raise UsageError("pf.maxPushBytes must be a size in bytes (k/m/g suffixes allowed)") from None
    return max(1, min(value, default))


def _open_local(remote: Remote) -> pygit2.Repository | None:
    """The remote's repository when it is on this machine (path or file://), for direct object access."""
    if os.environ.get("GIT_PF_NO_LOCAL_SHORTCUT"):
        return None
    path = remote.local_path()
    if path is None or not path.exists():
        return None
    try:
        return pygit2.Repository(str(path))
    except (pygit2.GitError, KeyError, ValueError):
        return None


def _link_pack(idx_path: Path, pack_dir: Path) -> bool:
    """Hard-link a pack and then its index into ``pack_dir`` (packs are immutable and named by
    their checksum); False when that cannot be done (another filesystem, no permission)."""
    pack_dir.mkdir(parents=True, exist_ok=True)
    for src in (idx_path.with_suffix(".pack"), idx_path):
        try:
            os.link(src, pack_dir / src.name)
        except FileExistsError:
            continue
        except OSError:
            return False
    return True


def _sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class GitAdapter(ObjectStore):
    def __init__(self, repo, remote: Remote, max_push_bytes: int = MAX_PUSH_BYTES):
        self.repo = repo
        self.git: pygit2.Repository = repo.git
        self.remote = remote
        self.cwd = Path(repo.git.workdir) if repo.git.workdir else repo.git_dir
        self.max_push_bytes = _max_push_bytes(repo.git, max_push_bytes)
        self.tip: str | None = None
        self.index: idx.Index = {}
        self.fresh = False
        self.direct = _open_local(remote)

    # -- what the remote holds -----------------------------------------
    def _git(self, args: list[str], **kw):
        return gitcmd.run(self.repo.git_dir, args, cwd=self.cwd, **kw)

    def local_tip(self) -> str | None:
        ref = self.git.references.get(self.remote.tracking("objects"))
        return idx.unwrap(self.git, str(ref.target)) if ref is not None else None

    def refresh(self) -> None:
        """Learn the remote's current index (one round trip; a depth-1 fetch when it moved)."""
        if self.direct is not None:
            ref = self.direct.references.get(OBJECTS_REF)
            tip = str(ref.target) if ref is not None else None
            if tip is not None and tip not in self.git.odb:
                scratch.copy_index(self.direct, self.git, tip)
        else:
            tip = gitcmd.ls_remote(self.repo.git_dir, self.remote.arg, [OBJECTS_REF], cwd=self.cwd).get(OBJECTS_REF)
            if tip is not None and tip not in self.git.odb:
                tip = self._fetch_index()
        self._set_tip(tip)
        self.fresh = True

    def _fetch_index(self) -> str:
        """Fetch the remote's index commit at depth 1 in a scratch repository (its shallow file
        stays there) and copy the commit and its tree here; the tip fetched."""
        seen = self.local_tip()
        with scratch.repository(self.git, [seen] if seen is not None and seen in self.git.odb else []) as (path, there):
            gitcmd.run(path, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
                              "--depth=1", self.remote.arg, f"+{OBJECTS_REF}:refs/heads/fetched"], cwd=self.cwd)
            tip = str(there.references["refs/heads/fetched"].target)
            scratch.copy_index(there, self.git, tip)
        return tip

    def load_local(self) -> None:
        """Use the index as last seen (no network)."""
        self._set_tip(self.local_tip())

    def _set_tip(self, tip: str | None) -> None:
        if tip is not None:
            wrapper = idx.wrap(self.git, tip)
            self.git.references.create(self.remote.tracking("objects"), pygit2.Oid(hex=wrapper), force=True)
        self.tip = tip
        self.index = idx.read_index(self.git, tip)

    def has(self, oids) -> set[str]:
        return {o for o in oids if o in self.index}

    # -- upload -------------------------------------------------------
    def _batches(self, store: SideStore, oids: list[str]) -> list[list[str]]:
        out, cur, size = [], [], 0
        for oid in oids:
            n = store.frame_size(oid)
            if cur and size + n > self.max_push_bytes:
                out.append(cur)
                cur, size = [], 0
            cur.append(oid)
            size += n
        return out + ([cur] if cur else [])

    def upload(self, store: SideStore, oids: list[str], progress: Progress) -> int:
        if not self.fresh:
            self.refresh()
        oids = [o for o in oids if o not in self.index]
        store.ensure(oids)
        sent = 0
        batches = self._batches(store, oids)
        with progress.task("uploading objects", len(oids)) as advance:
            for batch in batches:
                sent += self._push_batch(store, batch, progress)
                advance(len(batch))
        if self.direct is not None and batches:
            self.refresh()  # bring the new index commit here (depth 1) for the tracking ref
        return sent

    def _write_batch(self, store: SideStore, batch: list[str], git: pygit2.Repository) -> tuple[str, idx.Index]:
        sizes = {oid: store.frame_size(oid) for oid in batch}
        shapes = [(oid, sizes[oid], max(1, -(-sizes[oid] // idx.MAX_BLOB))) for oid in batch]

        def pieces():  # a few frames at a time, read ahead: a 1 GiB batch never sits in memory
            for (oid, size, n), frame in zip(shapes, store.iter_frames([oid for oid, _, _ in shapes])):
                if len(frame) != size:
                    raise PfError(f"side-store object {oid} changed while it was being pushed")
                for i in range(n):
                    yield frame[i * idx.MAX_BLOB : (i + 1) * idx.MAX_BLOB]

        ids = iter(packwrite.write_blobs(Path(common_dir(git.path)), pieces(), sum(n for _, _, n in shapes)))
        added = {oid: idx.Entry(size, tuple(next(ids) for _ in range(n))) for oid, size, n in shapes}
        return idx.write_data_commit(git, added), added

    def _push_batch(self, store: SideStore, batch: list[str], progress: Progress) -> int:
        if self.direct is not None:
            try:
                return self._push_batch_direct(store, batch)
            except OSError:
                self.direct = None  # not writable here: go through git push
        # The pack and commits are written in a scratch repository and pushed from there, so
        # the frames do not stay in this repository's packs beside the side store's copy.
        with scratch.repository(self.git) as (path, there):
            data, added = self._write_batch(store, batch, there)
            for _ in range(_RETRIES):
                commit = idx.write_index_commit(there, self.tip, self.index, added, data)
                # A lease, not a fast-forward check: that check walks history this repository does
                # not hold. The server still moves the ref only from the tip we built on.
                lease = f"--force-with-lease={OBJECTS_REF}:{self.tip or ''}"
                args = [*_NO_DELTA, "push", "--no-verify", lease, *progress.git_flag, self.remote.arg,
                        f"{commit}:{OBJECTS_REF}"]
                proc = gitcmd.run(path, args, check=False, quiet_stderr=not progress.enabled, cwd=self.cwd)
                if proc.returncode == 0:
                    scratch.copy_index(there, self.git, commit)
                    self._set_tip(commit)
                    return sum(e.size for e in added.values())
                before = self.tip
                self.refresh()
                if self.tip == before:  # not a lost race: a real failure
                    raise TransferFailed(f"pushing {OBJECTS_REF} to '{self.remote.arg}' failed: "
                                         f"{gitcmd.last_line(proc.stderr)}")
        raise TransferFailed(f"pushing {OBJECTS_REF} to '{self.remote.arg}' kept losing races with other pushes; try again")

    def _push_batch_direct(self, store: SideStore, batch: list[str]) -> int:
        """A remote on this machine: write the pack and commits into it, move its ref with compare-and-swap."""
        data, added = self._write_batch(store, batch, self.direct)
        self.tip, self.index = held.add_entries(self.direct, added, data)
        return sum(e.size for e in added.values())

    # -- download -----------------------------------------------------
    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        """Bring the blobs of ``oids`` into this repository's object database and list them in
        its own objects index; the side store reads (and verifies) them from there."""
        if not self.fresh and any(o not in self.index for o in oids):
            self.refresh()
        wanted = {o: self.index[o] for o in oids if o in self.index and not store.has(o)}
        blobs = sorted({b for e in wanted.values() for b in e.blobs if b not in self.git.odb})
        if blobs and self.direct is not None:
            self._link_blobs(blobs)
        elif blobs:
            self._fetch_blobs(blobs, progress)
        if store.held is None:
            store.held = held.HeldObjects(self.git)
        store.held.receive(wanted, self.remote.arg)  # verified as they are read, as every object

    def _link_blobs(self, blobs: list[str]) -> None:
        """A remote on this machine: link the packs that hold ``blobs`` into this repository (no
        data is copied on one filesystem); blobs that cannot be linked are copied as one new pack."""
        pack_dir = Path(common_dir(self.git.path)) / "objects" / "pack"
        rest: list[str] = []
        with packread.PackReader(Path(self.direct.path)) as there:
            packs: dict[Path, list[str]] = {}
            for b in blobs:
                where = there.locate(b)
                if where is None:
                    rest.append(b)
                else:
                    packs.setdefault(where, []).append(b)
            for idx_path, inside in packs.items():
                if not _link_pack(idx_path, pack_dir):
                    rest += inside
            rest = [b for b in rest if b in self.direct.odb]  # what the remote lacks, the check reports
            if rest:
                packwrite.write_blobs(Path(common_dir(self.git.path)), (self._remote_blob(b, there) for b in rest), len(rest))
        _sync_dir(pack_dir)  # the links are durable before any ref names what they hold

    def _remote_blob(self, blob: str, there: packread.PackReader) -> bytes:
        data = there.read(blob)
        return data if data is not None else self.direct.odb.read(blob)[1]

    def _fetch_blobs(self, blobs: list[str], progress: Progress) -> None:
        args = ["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--no-tags", "--no-write-fetch-head",
                "--recurse-submodules=no", *progress.git_flag]
        proc = self._git([*args, "--stdin", self.remote.arg], input="\n".join(blobs).encode() + b"\n",
                         check=False, quiet_stderr=True)
        if proc.returncode == 0:
            return
        # The server refuses unadvertised wants (protocol v0 without allowAnySHA1InWant):
        # fetch the whole objects history instead.
        self._git([*args, self.remote.arg, OBJECTS_REF])
