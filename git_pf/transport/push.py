"""Pushing images: plan the side-store objects the remote lacks, upload them, then push refs.

The plan is every object the pushed images (and their ancestors) reach
minus what the remote's objects index already lists.
Objects go first and refs last, so a remote never shows an image whose
objects it lacks (a configured adapter is recorded there too, ``storerecord``,
before the refs). Objects go only to the store pinned in local config
(``adapters.choice``), never to one that only the remote's record names, and
the result says where they went; a push killed half way leaves only unreferenced objects,
and re-running it sends what is still missing. Used by ``git pf push`` and
by the pre-push hook.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..image import refs as refs_mod
from ..core.errors import DataError, TransferFailed, UsageError
from . import adapters, gitcmd, reach, remotes, storerecord
from .progress import Progress
from .remotes import Remote


@dataclass
class UploadResult:
    images: int = 0
    objects: int = 0
    sent_objects: int = 0
    sent_bytes: int = 0
    destination: str = ""  # where the objects went, in words (adapters.describe)
    refs_pushed: bool = False  # the refspecs given went with the store record (not in the JSON)

    def to_json(self) -> dict:
        return {"images": self.images, "objects": self.objects, "sent_objects": self.sent_objects,
                "sent_bytes": self.sent_bytes, "destination": self.destination}


@dataclass
class PushResult:
    remote: str
    refs: list[str] = field(default_factory=list)
    upload: UploadResult = field(default_factory=UploadResult)

    def to_json(self) -> dict:
        return {"remote": self.remote, "refs": self.refs, **self.upload.to_json()}


def upload_objects(repo, remote: Remote, tips: list[str], progress: Progress,
                   refspecs: list[str] | None = None) -> UploadResult:
    """Send what the images of ``tips`` (and all their ancestors) need and the remote's index lacks.

    The remote's refs are not trusted to imply its objects (a push with
    GIT_PF_SKIP_PUSH, or by plain git, sends refs alone): its index decides. ``refspecs`` (the
    image refs of a ``git pf push``) go in the store record's own push when it has one, all or
    nothing (``storerecord.publish``): then ``refs_pushed``."""
    chosen = adapters.choice(repo, remote)  # the pin; never a store only the remote's record names
    adapter = adapters.make(repo, remote, chosen)
    adapter.begin_refresh()  # the remote is asked while the images are walked
    images = reach.walk_images(repo.git, tips)
    reached = reach.reach(repo.git, images)
    needed = reach.objects_of(repo.store, reached)
    adapter.refresh()
    have = adapter.has(needed)
    todo = [o for o in needed if o not in have]
    _check_local(repo, todo, needed)
    sent = adapter.upload(repo.store, todo, progress) if todo else 0
    sizes = getattr(adapter, "record_sizes", None)  # lfs: servers want each object's size to serve it
    bundles = getattr(adapter, "record_bundles", None)  # lfs: where objects sent in bundles lie
    pushed = False
    if chosen.kind in storerecord.RECORDED and (chosen.source == "config" or sizes):
        pushed = storerecord.publish(repo, remote, chosen.kind, getattr(adapter, "record_url", chosen.url), sizes,
                                     bundles, getattr(adapter, "record_tip", storerecord.UNASKED),
                                     refspecs or ())  # before any image ref moves, or with them
    return UploadResult(len(images), len(needed), len(todo), sent, adapters.describe(repo, remote, chosen), pushed)


def _check_local(repo, todo: list[str], needed: dict) -> None:
    """Every object of ``todo`` local (fetched from another remote where lazily held), or one
    DataError line naming an image that needs the first one that is not."""
    missing = [o for o in todo if not repo.store.has(o)]
    if not missing:
        return
    try:
        repo.store.ensure(missing)
    except DataError:
        pass
    for oid in missing:
        if not repo.store.has(oid):
            need = needed.get(oid)
            where = f"image {need.image[:12]} path '{need.path}'" if need else "an image"
            raise DataError(f"cannot push: {where} needs side-store object {oid}, which is not in the local store")


def refspecs_for(repo, revs: list[str], all_: bool) -> list[tuple[str, str]]:
    """``(full ref, image id)`` to push: each REV a branch, tag or full refs/pf/ name."""
    git = repo.git
    if all_:
        found = {refs_mod.HEADS + n: o for n, o in refs_mod.list_refs(git, refs_mod.HEADS).items()}
        found.update({refs_mod.TAGS + n: o for n, o in refs_mod.list_refs(git, refs_mod.TAGS).items()})
        return sorted(found.items())
    if not revs:
        branch = refs_mod.current_branch(git)
        if branch is None or refs_mod.branch_tip(git, branch) is None:
            raise UsageError("no current image branch to push (name one, or use --all)")
        revs = [branch]
    out = []
    for rev in revs:
        candidates = [rev] if rev.startswith(refs_mod.ROOT) else [refs_mod.HEADS + rev, refs_mod.TAGS + rev]
        ref = next((git.references.get(c) for c in candidates if git.references.get(c) is not None), None)
        if ref is None or ref.name.startswith(("refs/pf/remotes/", refs_mod.OBJECTS)):
            raise UsageError(f"'{rev}' is not an image branch or tag (push branches or tags, not ids)")
        out.append((ref.name, str(ref.resolve().target)))
    return out


def push(repo, remote: Remote, revs: list[str], all_: bool = False, force: bool = False,
         progress: Progress | None = None) -> PushResult:
    progress = progress or Progress(True)
    targets = refspecs_for(repo, revs, all_)
    result = PushResult(remote.arg, [r for r, _ in targets])
    if not targets:
        return result
    specs = [f"{'+' if force else ''}{r}:{r}" for r, _ in targets]
    result.upload = upload_objects(repo, remote, [o for _, o in targets], progress, specs)
    if not result.upload.refs_pushed:
        proc = gitcmd.run(repo.git_dir, ["push", *progress.git_flag, remote.arg, *specs], check=False,
                          quiet_stderr=True, env={"GIT_PF_SKIP_PUSH": "1"},
                          cwd=repo.git.workdir or repo.git_dir)
        if proc.returncode != 0:
            raise TransferFailed(f"git push to '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
    for ref, oid in targets:
        if ref.startswith(refs_mod.HEADS):
            repo.git.references.create(remote.tracking("heads/" + ref[len(refs_mod.HEADS):]), oid, force=True)
    return result


def pre_push(repo, remote_arg: str, url: str, lines: list[str], progress: Progress) -> UploadResult:
    """The pre-push hook: upload the objects of the images among the pushed refs."""
    zero = "0" * 40
    tips = []
    for line in lines:
        parts = line.split()
        if len(parts) != 4:
            continue
        local_ref, local_oid, _, _ = parts
        if local_oid != zero and local_ref.startswith(refs_mod.ROOT) and not local_ref.startswith(
                (refs_mod.OBJECTS, "refs/pf/remotes/")):
            tips.append(local_oid)
    known = remote_arg in remotes.names(repo)
    remote = Remote(remote_arg if known else None, url, remotes.workdir(repo))
    if not tips:
        return UploadResult()
    return upload_objects(repo, remote, tips, progress)
