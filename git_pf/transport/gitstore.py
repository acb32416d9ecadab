"""The default adapter: side-store objects as git blobs under the remote's ``refs/pf/objects``.

``refresh`` learns the remote's index with one ``ls-remote`` and, when the
tip is new, a depth-1 fetch (index only, no data). ``upload`` writes the
frames as one pack, adds a data commit and an index commit on top of the
remote's tip, and pushes that ref alone (no hooks, no delta search), in
batches of at most 1 GiB; a push that loses a race rebuilds its index commit
on the new tip and retries. ``download`` wants the blobs by id (protocol v2
allows it), falling back to fetching the whole ref history where the server
refuses. Frames are verified before they enter the local store.
"""
from __future__ import annotations

import mmap
import os
from contextlib import contextmanager
from pathlib import Path

import pygit2

from ..errors import CorruptObject, PfError, UsageError
from ..sidestore import SideStore
from . import bulkput, gitcmd, index as idx, packread, packwrite
from .progress import Progress
from .remotes import Remote

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


def _map_frame(store: SideStore, oid: str) -> memoryview:
    """The stored frame of ``oid``, mapped read-only (unmapped once nothing refers to it)."""
    store.ensure([oid])
    with open(store.path_for(oid), "rb") as f:
        if os.fstat(f.fileno()).st_size < 1 << 20:
            return memoryview(f.read())
        return memoryview(mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ))


@contextmanager
def _no_sha1_recheck():
    """libgit2 re-hashes every object it reads (SHA-1, slowly); frames are checked by their
    sha256 anyway, so skip that while importing them."""
    pygit2.settings.enable_strict_hash_verification(False)
    try:
        yield
    finally:
        pygit2.settings.enable_strict_hash_verification(True)


class GitAdapter:
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
        return str(ref.target) if ref is not None else None

    def refresh(self) -> None:
        """Learn the remote's current index (one round trip; a depth-1 fetch when it moved)."""
        if self.direct is not None:
            ref = self.direct.references.get(OBJECTS_REF)
            tip = str(ref.target) if ref is not None else None
        else:
            tip = gitcmd.ls_remote(self.repo.git_dir, self.remote.arg, [OBJECTS_REF], cwd=self.cwd).get(OBJECTS_REF)
        if tip is not None and tip not in self.git.odb:
            self._git(["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
                       "--depth=1", self.remote.arg, f"+{OBJECTS_REF}:{self.remote.tracking('objects')}"])
        self._set_tip(tip)
        self.fresh = True

    def load_local(self) -> None:
        """Use the index as last seen (no network)."""
        self._set_tip(self.local_tip())

    def _set_tip(self, tip: str | None) -> None:
        if tip is not None:
            self.git.references.create(self.remote.tracking("objects"), pygit2.Oid(hex=tip), force=True)
        self.tip = tip
        self.index = idx.read_index(self.git, tip)

    def has(self, oids) -> set[str]:
        return {o for o in oids if o in self.index}

    # -- upload -------------------------------------------------------
    def _batches(self, store: SideStore, oids: list[str]) -> list[list[str]]:
        out, cur, size = [], [], 0
        for oid in oids:
            n = store.path_for(oid).stat().st_size
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
        sizes = {oid: store.path_for(oid).stat().st_size for oid in batch}
        shapes = [(oid, sizes[oid], max(1, -(-sizes[oid] // idx.MAX_BLOB))) for oid in batch]

        def pieces():  # one frame at a time, mapped rather than copied: a 1 GiB batch never sits in memory
            for oid, size, n in shapes:
                frame = _map_frame(store, oid)
                if len(frame) != size:
                    raise PfError(f"side-store object {oid} changed while it was being pushed")
                for i in range(n):
                    yield frame[i * idx.MAX_BLOB : (i + 1) * idx.MAX_BLOB]

        ids = iter(packwrite.write_blobs(Path(git.path), pieces(), sum(n for _, _, n in shapes)))
        added = {oid: idx.Entry(size, tuple(next(ids) for _ in range(n))) for oid, size, n in shapes}
        return idx.write_data_commit(git, added), added

    def _push_batch(self, store: SideStore, batch: list[str], progress: Progress) -> int:
        if self.direct is not None:
            try:
                return self._push_batch_direct(store, batch)
            except OSError:
                self.direct = None  # not writable here: go through git push
        data, added = self._write_batch(store, batch, self.git)
        for _ in range(_RETRIES):
            commit = idx.write_index_commit(self.git, self.tip, self.index, added, data)
            proc = self._git([*_NO_DELTA, "push", "--no-verify", *progress.git_flag, self.remote.arg,
                              f"{commit}:{OBJECTS_REF}"], check=False, quiet_stderr=not progress.enabled)
            if proc.returncode == 0:
                self._set_tip(commit)
                return sum(e.size for e in added.values())
            before = self.tip
            self.refresh()
            if self.tip == before:  # not a lost race: a real failure
                raise PfError(f"pushing {OBJECTS_REF} to '{self.remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
        raise PfError(f"pushing {OBJECTS_REF} to '{self.remote.arg}' kept losing races with other pushes; try again")

    def _push_batch_direct(self, store: SideStore, batch: list[str]) -> int:
        """A remote on this machine: write the pack and commits into it, move its ref with compare-and-swap."""
        rgit = self.direct
        data, added = self._write_batch(store, batch, rgit)
        for _ in range(_RETRIES):
            ref = rgit.references.get(OBJECTS_REF)
            tip = str(ref.target) if ref is not None else None
            base = idx.read_index(rgit, tip)
            commit = idx.write_index_commit(rgit, tip, base, added, data)
            proc = gitcmd.run(Path(rgit.path), ["update-ref", "-m", "git-pf push", OBJECTS_REF, commit, tip or "0" * 40],
                              check=False)
            if proc.returncode == 0:
                self.tip, self.index = commit, {**base, **added}
                return sum(e.size for e in added.values())
        raise PfError(f"updating {OBJECTS_REF} in '{self.remote.arg}' kept losing races with other pushes; try again")

    # -- download -----------------------------------------------------
    def download(self, store: SideStore, oids: list[str], progress: Progress) -> None:
        if not self.fresh and any(o not in self.index for o in oids):
            self.refresh()
        wanted = {o: self.index[o] for o in oids if o in self.index and not store.has(o)}
        blobs = sorted({b for e in wanted.values() for b in e.blobs if b not in self.git.odb})
        if blobs and self.direct is None:
            self._fetch_blobs(blobs, progress)
        with progress.task("importing objects", len(wanted)) as advance, _no_sha1_recheck(), \
                packread.PackReader(Path(self.git.path)) as here, self._remote_packs() as there:
            def frames():
                for oid, entry in wanted.items():
                    yield oid, b"".join(self._blob(b, oid, here, there) for b in entry.blobs)
                    advance(1)

            bulkput.put_many(store, frames())  # verified: decodes and hashes to oid, else refused

    def _remote_packs(self) -> packread.PackReader:
        return packread.PackReader(Path(self.direct.path) if self.direct is not None else None)

    def _blob(self, blob: str, oid: str, here: packread.PackReader, there: packread.PackReader) -> bytes:
        """One blob, sliced from a pack when it is stored as plain blocks, else read through libgit2.

        Neither path checks it: the frame it belongs to is verified before it is stored."""
        try:
            if self.direct is not None and blob not in self.git.odb:
                # a remote on this machine: read its objects in place
                data = there.read(blob)
                return data if data is not None else self.direct.odb.read(blob)[1]
            data = here.read(blob)
            return data if data is not None else self.git.odb.read(blob)[1]
        except KeyError:
            raise CorruptObject(f"remote '{self.remote.arg}' did not send object {oid} (blob {blob[:12]})") from None

    def _fetch_blobs(self, blobs: list[str], progress: Progress) -> None:
        args = ["-c", "fetch.negotiationAlgorithm=noop", "fetch", "--no-tags", "--no-write-fetch-head",
                "--recurse-submodules=no", *progress.git_flag]
        proc = self._git([*args, "--stdin", self.remote.arg], input="\n".join(blobs).encode() + b"\n",
                         check=False, quiet_stderr=True)
        if proc.returncode == 0:
            return
        # The server refuses unadvertised wants (protocol v0 without allowAnySHA1InWant):
        # fetch the whole objects history instead.
        self._git([*args, "--depth=2147483647", self.remote.arg, f"+{OBJECTS_REF}:{self.remote.tracking('objects')}"])
