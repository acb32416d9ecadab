"""The adapter a remote records: ``refs/pf/meta/store``, so a clone finds its objects with no flags.

The ref names a parentless commit (time 0, author git-pf) whose tree holds
``store.json``: ``{"adapter": "git"|"lfs"|"s3", "url": <string or null>}``
(sorted keys, one line), and, for adapters whose servers need each object's
size to serve it (lfs), ``sizes/<2 hex>`` blobs: lines ``<sha256> <bytes>\n``,
sorted, each oid in the bucket of its first two hex digits, cumulative (every
object pushed through that adapter). ``url`` is the lfs endpoint (null:
derived from the git remote's URL, as git-lfs does) or the
``s3://bucket/prefix``; never credentials (a URL's user and password are
dropped before it is written). A push through a recorded adapter writes it
to the remote before any image ref, when it differs (compare-and-swap on the
ref, merged with what another push added meanwhile); ``git pf fetch`` brings
it to ``refs/pf/remotes/<r>/meta/store``. What a remote recorded is
untrusted: read back only through ``decode`` and ``decode_sizes``, which
refuse anything but that shape.
Writes only the record commit, its tracking ref and the remote's record ref.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit, urlunsplit

import pygit2

from ..errors import DataError, TransferFailed, UsageError
from . import gitcmd
from .remotes import Remote

REF = "refs/pf/meta/store"
TRACKING = "meta/store"
FILE = "store.json"
MAX_BYTES = 4096
RECORDED = ("git", "lfs", "s3")
_S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()/-]*)?$")
_SIG = pygit2.Signature("git-pf", "git-pf@localhost", 0, 0)
_SIZE_LINE = re.compile(r"^([0-9a-f]{64}) (0|[1-9][0-9]{0,15})$")
_BUCKET = re.compile(r"^[0-9a-f]{2}$")
_MAX_BUCKET = 64 * 1024 * 1024
_RETRIES = 5


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
    if url is not None and (not isinstance(url, str) or len(url) > 2048 or any(ord(c) < 33 or c == "\x7f" for c in url)):
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


def decode_sizes(data: bytes, prefix: str, where: str) -> dict[str, int]:
    """The ``<oid> <bytes>`` lines of one sizes bucket; one DataError line for anything else."""
    out: dict[str, int] = {}
    try:
        for line in data.decode("ascii").split("\n")[:-1] if data.endswith(b"\n") else [None]:
            m = _SIZE_LINE.match(line or "")
            if not m or not m.group(1).startswith(prefix):
                raise ValueError(line)
            out[m.group(1)] = int(m.group(2))
    except (ValueError, UnicodeDecodeError):
        raise DataError(f"{where} is not a valid store record (bad sizes/{prefix})") from None
    return out


def _tree(git: pygit2.Repository, oid: str, where: str) -> pygit2.Tree:
    try:
        commit = git[oid]
        if not isinstance(commit, pygit2.Commit):
            raise KeyError(oid)
        return commit.tree
    except (KeyError, ValueError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (expected a commit)") from None


def _read_commit(git: pygit2.Repository, oid: str, where: str) -> tuple[str, str | None]:
    tree = _tree(git, oid, where)
    try:
        blob = git[tree[FILE].id]
        if not isinstance(blob, pygit2.Blob) or any(e.name not in (FILE, "sizes") for e in tree):
            raise KeyError(FILE)
    except (KeyError, ValueError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (expected {FILE} and sizes/ only)") from None
    return decode(blob.data, where)


def read_sizes(git: pygit2.Repository, oid: str | None, where: str) -> dict[str, int]:
    """Every ``oid: bytes`` the record commit ``oid`` lists (empty for None)."""
    if oid is None:
        return {}
    tree = _tree(git, oid, where)
    if "sizes" not in tree:
        return {}
    out: dict[str, int] = {}
    try:
        for entry in git[tree["sizes"].id]:
            blob = git[entry.id]
            if not isinstance(blob, pygit2.Blob) or not _BUCKET.match(entry.name) or blob.size > _MAX_BUCKET:
                raise KeyError(entry.name)
            out.update(decode_sizes(blob.data, entry.name, where))
    except (KeyError, ValueError, TypeError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (bad sizes/)") from None
    return out


def recorded(repo, remote: Remote) -> tuple[str, str | None] | None:
    """What ``remote`` recorded, as last fetched; None when it recorded nothing."""
    ref = repo.git.references.get(remote.tracking(TRACKING))
    if ref is None:
        return None
    return _read_commit(repo.git, str(ref.target), f"the store record of remote '{remote.arg}'")


def write_commit(git: pygit2.Repository, kind: str, url: str | None, sizes: dict[str, int] | None = None) -> str:
    builder = git.TreeBuilder()
    builder.insert(FILE, git.create_blob(encode(kind, url)), pygit2.enums.FileMode.BLOB)
    if sizes:
        buckets: dict[str, list[str]] = {}
        for oid in sorted(sizes):
            buckets.setdefault(oid[:2], []).append(f"{oid} {sizes[oid]}\n")
        inner = git.TreeBuilder()
        for name, lines in buckets.items():
            inner.insert(name, git.create_blob("".join(lines).encode("ascii")), pygit2.enums.FileMode.BLOB)
        builder.insert("sizes", inner.write(), pygit2.enums.FileMode.TREE)
    return str(git.create_commit(None, _SIG, _SIG, f"git-pf store record: {kind}\n", builder.write(), []))


def _cwd(repo):
    return repo.git.workdir or repo.git_dir


def refresh(repo, remote: Remote) -> str | None:
    """Bring the remote's current record to its tracking ref (a fetch only when it moved); its id."""
    theirs = gitcmd.ls_remote(repo.git_dir, remote.arg, [REF], cwd=_cwd(repo)).get(REF)
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


def publish(repo, remote: Remote, kind: str, url: str | None, sizes: dict[str, int] | None = None) -> bool:
    """Record ``kind``/``url`` (and ``sizes``, added to what the remote lists) on ``remote``,
    before its image refs move; True when the remote's record changed."""
    url = without_credentials(url) if url else None
    where = f"the store record of remote '{remote.arg}'"
    for _ in range(_RETRIES):
        theirs = refresh(repo, remote)
        merged = dict(read_sizes(repo.git, theirs, where)) if theirs and sizes is not None else {}
        merged.update(sizes or {})
        commit = write_commit(repo.git, kind, url, merged)
        if theirs == commit or (theirs is None and kind == "git"):
            return False  # no record reads as git
        lease = f"--force-with-lease={REF}:{theirs or ''}"
        proc = gitcmd.run(repo.git_dir, ["push", "--no-verify", "--quiet", lease, remote.arg, f"{commit}:{REF}"],
                          cwd=_cwd(repo), env={"GIT_PF_SKIP_PUSH": "1"}, check=False)
        if proc.returncode == 0:
            repo.git.references.create(remote.tracking(TRACKING), pygit2.Oid(hex=commit), force=True)
            return True
        if refresh(repo, remote) == theirs:  # not a lost race: a real failure
            raise TransferFailed(f"recording the object store on '{remote.arg}' failed: {gitcmd.last_line(proc.stderr)}")
    raise TransferFailed(f"recording the object store on '{remote.arg}' kept losing races with other pushes; try again")
