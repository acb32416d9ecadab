"""The adapter a remote records: ``refs/pf/meta/store``, so a clone finds its objects with no flags.

The ref names a parentless commit (time 0, author git-pf) whose tree holds
``store.json``: ``{"adapter": "git"|"lfs"|"s3", "url": <string or null>}``
(sorted keys, one line), and, for adapters whose servers need each object's
size to serve it (lfs), ``sizes/<2 hex>`` blobs: lines ``<sha256> <bytes>\n``,
sorted, each oid in the bucket of its first two hex digits, cumulative (every
object pushed through that adapter), and for lfs ``bundles/<2 hex>`` blobs:
lines ``<sha256> <bundle sha256> <bundle bytes> <offset>\n`` for each object
sent inside a bundle (``lfsbundle``), bucketed and sorted the same way. ``url`` is the lfs endpoint (null:
derived from the git remote's URL, as git-lfs does) or the
``s3://bucket/prefix``; never credentials (a URL's user and password are
dropped before it is written). A push through a recorded adapter writes it
to the remote before any image ref, when it differs (compare-and-swap on the
ref, merged with what another push added meanwhile); ``git pf fetch`` brings
it to ``refs/pf/remotes/<r>/meta/store``. What a remote recorded is
untrusted: read back only through ``decode``, ``decode_sizes`` and
``decode_bundles``, which refuse anything but that shape (a bundle line must
name an object the sizes list, inside its bundle, with one size per bundle),
and it never chooses where objects go: ``adapters`` uses the store pinned in
local config; a record naming another store lists nothing, and the listings
of the last record that named the store in use are kept for it
(``listings_for``, ``refs/pf/remotes/<r>/meta/pinned``).
Writes only the record commit, its tracking refs and the remote's record ref (and the image
refs a ``git pf push`` hands ``publish``, in the same atomic push).
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit, urlunsplit

import pygit2

from ..core.errors import DataError, TransferFailed, UsageError
from ..image.tree import MODE_FILE, MODE_TREE, TreeWriter, blob_size
from ..store.packfile import add_commit, packed
from . import gitcmd
from .remotes import Remote

REF = "refs/pf/meta/store"
TRACKING = "meta/store"
PINNED = "meta/pinned"  # local only (fetch never brings a remote's ref there): the last record naming our store
FILE = "store.json"
MAX_BYTES = 4096
RECORDED = ("git", "lfs", "s3")
_S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()/-]*)?$")
_SIG = pygit2.Signature("git-pf", "git-pf@localhost", 0, 0)
_NUMBER = r"(0|[1-9][0-9]{0,15})"
_SIZE_LINE = re.compile(rf"^([0-9a-f]{{64}}) {_NUMBER}$")
_BUNDLE_LINE = re.compile(rf"^([0-9a-f]{{64}}) ([0-9a-f]{{64}}) {_NUMBER} {_NUMBER}$")
LISTINGS = ("sizes", "bundles")
_BUCKET = re.compile(r"^[0-9a-f]{2}$")
_MAX_BUCKET = 64 * 1024 * 1024
_RETRIES = 5
MAX_BUNDLE = 2 << 30  # twice the largest bundle target (lfsbundle)


def check_s3_url(url: str, where: str) -> None:
    if not _S3_RE.match(url) or "//" in url[5:] or "/../" in url + "/" or "/./" in url + "/":
        raise UsageError(f"{where}: '{url}' is not an s3://<bucket>/<prefix> URL")


def without_credentials(url: str) -> str:
    """``url`` with any user name and password removed."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if parts.port:
        netloc += f":{parts.port}"
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def encode(kind: str, url: str | None) -> bytes:
    return (json.dumps({"adapter": kind, "url": url}, sort_keys=True) + "\n").encode()


def decode(data: bytes, where: str) -> tuple[str, str | None]:
    """``(adapter, url)`` from a record's bytes; one DataError line for anything else."""
    bad = f"{where} is not a valid store record"
    if len(data) > MAX_BYTES:
        raise DataError(f"{bad} (over {MAX_BYTES} bytes)")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DataError(f"{bad} (not JSON)") from None
    if not isinstance(doc, dict) or set(doc) != {"adapter", "url"}:
        raise DataError(f"{bad} (needs exactly 'adapter' and 'url')")
    kind, url = doc["adapter"], doc["url"]
    if kind not in RECORDED:
        raise DataError(f"{bad} (unknown adapter {str(kind)[:40]!r})")
    if url is not None and (not isinstance(url, str) or len(url) > 2048
                            or any(c == " " or not c.isprintable() for c in url)):
        raise DataError(f"{bad} (bad url)")
    if kind == "git" and url is not None:
        raise DataError(f"{bad} (the git adapter takes no url)")
    if kind == "lfs" and url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
            raise DataError(f"{bad} (an lfs url is http(s)://host/... with no credentials)")
    if kind == "s3":
        try:
            check_s3_url(url or "", where)
        except UsageError:
            raise DataError(f"{bad} (an s3 url is s3://<bucket>/<prefix>)") from None
    return kind, url


def _decode_lines(data: bytes, prefix: str, pattern: re.Pattern, listing: str, where: str) -> list[tuple[str, ...]]:
    """The matches of ``pattern`` on each line of one bucket, each naming an oid of that bucket."""
    out = []
    try:
        for line in data.decode("ascii").split("\n")[:-1] if data.endswith(b"\n") else [None]:
            m = pattern.match(line or "")
            if not m or not m.group(1).startswith(prefix):
                raise ValueError(line)
            out.append(m.groups())
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{where} is not a valid store record (bad {listing}/{prefix})") from None
    return out


def decode_sizes(data: bytes, prefix: str, where: str) -> dict[str, int]:
    """The ``<oid> <bytes>`` lines of one sizes bucket; one DataError line for anything else."""
    return {oid: int(n) for oid, n in _decode_lines(data, prefix, _SIZE_LINE, "sizes", where)}


def decode_bundles(data: bytes, prefix: str, where: str) -> dict[str, tuple[str, int, int]]:
    """The ``<oid> <bundle> <bundle bytes> <offset>`` lines of one bundles bucket:
    ``{oid: (bundle, bundle bytes, offset)}``; one DataError line for anything else."""
    return {oid: (bundle, int(size), int(offset))
            for oid, bundle, size, offset in _decode_lines(data, prefix, _BUNDLE_LINE, "bundles", where)}


def check_bundles(sizes: dict[str, int], bundles: dict[str, tuple[str, int, int]], where: str) -> None:
    """Every bundled object is listed with its size and lies inside its bundle; every line
    naming one bundle gives it the same size, at most ``MAX_BUNDLE``; no bundle is also
    listed as an object of its own."""
    seen: dict[str, int] = {}
    for oid, (bundle, total, offset) in bundles.items():
        size = sizes.get(oid)
        if size is None or offset + size > total or seen.setdefault(bundle, total) != total or bundle in sizes \
                or total > MAX_BUNDLE:
            raise DataError(f"{where} is not a valid store record (bundles/{oid[:2]}: {oid} does not fit its bundle)")


def _tree(git: pygit2.Repository, oid: str, where: str) -> pygit2.Tree:
    try:
        commit = git[oid]
        if not isinstance(commit, pygit2.Commit):
            raise KeyError(oid)
        return commit.tree
    except (KeyError, ValueError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (expected a commit)") from None


def _blob(git: pygit2.Repository, entry, limit: int, where: str) -> bytes:
    """The bytes of the blob a tree entry names, read only when its object header says at
    most ``limit`` (git compresses blobs: a few KiB pushed may be gigabytes read): over it
    is a DataError, anything but a blob a KeyError."""
    if entry.type_str != "blob":
        raise KeyError(entry.name)
    if blob_size(git, entry.id.raw) > limit:
        raise DataError(f"{where} is not a valid store record ({entry.name}: over {limit} bytes)")
    return git.odb.read(entry.id)[1]


def _read_commit(git: pygit2.Repository, oid: str, where: str) -> tuple[str, str | None]:
    tree = _tree(git, oid, where)
    try:
        if any(e.name not in (FILE, *LISTINGS) for e in tree):
            raise KeyError(FILE)
        data = _blob(git, tree[FILE], MAX_BYTES, where)
    except (KeyError, ValueError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (expected {FILE}, sizes/ and bundles/ "
                        f"only)") from None
    return decode(data, where)


def _read_listing(git: pygit2.Repository, tree: pygit2.Tree, listing: str, decode, where: str) -> dict:
    if listing not in tree:
        return {}
    out: dict = {}
    try:
        for entry in git[tree[listing].id]:
            if not _BUCKET.match(entry.name):
                raise KeyError(entry.name)
            out.update(decode(_blob(git, entry, _MAX_BUCKET, where), entry.name, where))
    except (KeyError, ValueError, TypeError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (bad {listing}/)") from None
    return out


def read_listings(git: pygit2.Repository, oid: str | None, where: str) -> tuple[dict[str, int], dict]:
    """``(sizes, bundles)`` of the record commit ``oid`` (both empty for None), checked."""
    if oid is None:
        return {}, {}
    tree = _tree(git, oid, where)
    sizes = _read_listing(git, tree, "sizes", decode_sizes, where)
    bundles = _read_listing(git, tree, "bundles", decode_bundles, where)
    check_bundles(sizes, bundles, where)
    return sizes, bundles


def listings_for(repo, remote: Remote, oid: str | None, names_ours, where: str) -> tuple[dict[str, int], dict]:
    """``(sizes, bundles)`` of the record commit ``oid`` when it is valid and
    ``names_ours(adapter, url)`` (it is then remembered as ``refs/pf/remotes/<r>/meta/pinned``);
    else of the record last remembered so; else both empty. A record naming another store, or
    one that is not valid, lists nothing of the store in use, and takes nothing away from it."""
    pinned_ref = remote.tracking(PINNED)
    pinned = repo.git.references.get(pinned_ref)
    for candidate in (oid, str(pinned.target) if pinned is not None else None):
        if candidate is None:
            continue
        try:
            if not names_ours(*_read_commit(repo.git, candidate, where)):
                continue
            found = read_listings(repo.git, candidate, where)
        except DataError:
            continue
        if pinned is None or str(pinned.target) != candidate:
            repo.git.references.create(pinned_ref, pygit2.Oid(hex=candidate), force=True)
        return found
    return {}, {}


def recorded(repo, remote: Remote) -> tuple[str, str | None] | None:
    """What ``remote`` recorded, as last fetched; None when it recorded nothing."""
    ref = repo.git.references.get(remote.tracking(TRACKING))
    if ref is None:
        return None
    return _read_commit(repo.git, str(ref.target), f"the store record of remote '{remote.arg}'")


def write_commit(git: pygit2.Repository, kind: str, url: str | None, sizes: dict[str, int] | None = None,
                 bundles: dict[str, tuple[str, int, int]] | None = None) -> str:
    lines = {"sizes": {o: f"{o} {n}\n" for o, n in (sizes or {}).items()},
             "bundles": {o: f"{o} {b} {n} {off}\n" for o, (b, n, off) in (bundles or {}).items()}}
    with packed(git) as pack:  # one pack, no loose object (docs/format.md)
        writer = TreeWriter(git)
        top = [(FILE.encode(), MODE_FILE, writer.write_blob(encode(kind, url)))]
        top += [(listing.encode(), MODE_TREE, _bucket_tree(writer, by_oid)) for listing, by_oid in lines.items() if by_oid]
        return add_commit(pack, _SIG, _SIG, f"git-pf store record: {kind}\n", writer.write(top).hex(), [])


def _bucket_tree(writer: TreeWriter, lines: dict[str, str]) -> bytes:
    """A tree of ``<2 hex>`` blobs holding ``lines`` (oid -> its line), sorted by oid."""
    buckets: dict[str, list[str]] = {}
    for oid in sorted(lines):
        buckets.setdefault(oid[:2], []).append(lines[oid])
    return writer.write([(name.encode(), MODE_FILE, writer.write_blob("".join(bucket).encode("ascii")))
                         for name, bucket in buckets.items()])


def _cwd(repo):
    return repo.git.workdir or repo.git_dir


def ask(repo, remote: Remote) -> gitcmd.Started:
    """The ``ls-remote`` of ``refresh`` begun now, so it runs while the caller works."""
    return gitcmd.start_ls_remote(repo.git_dir, remote.arg, [REF], cwd=_cwd(repo))


def refresh(repo, remote: Remote, asked: gitcmd.Started | None = None) -> str | None:
    """Bring the remote's current record to its tracking ref (a fetch only when it moved); its id.
    ``asked``: the remote's answer as ``ask`` began asking for it."""
    theirs = gitcmd.ls_remote(repo.git_dir, remote.arg, [REF], cwd=_cwd(repo), started=asked).get(REF)
    if theirs is not None and theirs not in repo.git.odb:
        gitcmd.run(repo.git_dir, ["fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--recurse-submodules=no",
                                  remote.arg, f"+{REF}:{remote.tracking(TRACKING)}"], cwd=_cwd(repo))
    if theirs is not None:
        repo.git.references.create(remote.tracking(TRACKING), pygit2.Oid(hex=theirs), force=True)
    return theirs


def tracked(repo, remote: Remote) -> str | None:
    """The record commit of ``remote`` as last fetched, or None."""
    ref = repo.git.references.get(remote.tracking(TRACKING))
    return str(ref.target) if ref is not None else None


UNASKED = object()  # ``publish``'s ``known`` when this push has not read the remote's record yet


def publish(repo, remote: Remote, kind: str, url: str | None, sizes: dict[str, int] | None = None,
            bundles: dict[str, tuple[str, int, int]] | None = None, known=UNASKED,
            refs: list[str] | tuple[str, ...] = ()) -> bool:
    """Record ``kind``/``url`` (and ``sizes`` and ``bundles``, added to what the remote lists)
    on ``remote``, before its image refs move. ``known`` is the record's tip as this push
    already read it (``refresh``; None: no record), so it is not asked for again: the lease
    still makes the push a compare-and-swap, and a lost race reads the record afresh.

    With ``refs`` (image refspecs) the record goes in the same ``git push --atomic``: the server
    moves all of them or none, so a remote still never shows an image whose store it does not
    name. True when ``refs`` went so (the caller pushes them itself otherwise: the record did
    not change, or the server cannot push atomically and got the record alone first). A ref of
    ``refs`` that git refuses fails as the caller's own push would, in one line."""
    url = without_credentials(url) if url else None
    where = f"the store record of remote '{remote.arg}'"
    theirs = known
    atomic = bool(refs)
    for _ in range(_RETRIES):
        if theirs is UNASKED:
            theirs = refresh(repo, remote)
        their_sizes, their_bundles = listings_for(repo, remote, theirs, lambda k, u: (k, u) == (kind, url), where) \
            if sizes is not None else ({}, {})
        merged_sizes = {**their_sizes, **(sizes or {})}
        merged_bundles = {**their_bundles, **(bundles or {})}
        commit = write_commit(repo.git, kind, url, merged_sizes, merged_bundles)
        if theirs == commit or (theirs is None and kind == "git"):
            return False  # no record reads as git
        lease = f"--force-with-lease={REF}:{theirs or ''}"
        how = ["--atomic", "--porcelain"] if atomic else ["--no-verify"]  # the user's hook sees image refs
        proc = gitcmd.run(repo.git_dir, ["push", "--quiet", *how, lease, remote.arg, f"{commit}:{REF}",
                                         *(refs if atomic else ())],
                          cwd=_cwd(repo), env={"GIT_PF_SKIP_PUSH": "1"}, check=False)
        if proc.returncode == 0:
            repo.git.references.create(remote.tracking(TRACKING), pygit2.Oid(hex=commit), force=True)
            return atomic
        if atomic and b"does not support --atomic" in proc.stderr:
            atomic = False  # the record alone first, then the caller's push of the refs
            continue
        now = refresh(repo, remote)
        if now == theirs:  # not a lost race: a real failure
            if atomic and _refused_other_than(proc.stdout, REF):
                raise TransferFailed(f"git push to '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
            raise TransferFailed(f"recording the object store on '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
        theirs = now
    raise TransferFailed(f"recording the object store on '{remote.arg}' kept losing races with other pushes; try again")


def _refused_other_than(porcelain: bytes, ref: str) -> bool:
    """Whether ``git push --porcelain`` refused a ref other than ``ref`` for a reason of its own
    (not only because the atomic push as a whole failed)."""
    for line in porcelain.decode("utf-8", "replace").splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] == "!" and parts[1].rpartition(":")[2] != ref \
                and "atomic push failed" not in parts[2]:
            return True
    return False
