"""The adapter a remote records: ``refs/pf/meta/store``, so a clone finds its objects with no flags.

The ref names a commit (time 0, author git-pf) whose tree holds one blob,
``store.json``: ``{"adapter": "git"|"lfs"|"s3", "url": <string or null>}``
(sorted keys, one line). ``url`` is the lfs endpoint (null: derived from the
git remote's URL, as git-lfs does) or the ``s3://bucket/prefix``; never
credentials (a URL's user and password are dropped before it is written).
A push whose adapter is configured (``pf.remote.<name>.store``) writes it to the
remote before any image ref, when it differs; ``git pf fetch`` brings it to
``refs/pf/remotes/<r>/meta/store``. What a remote recorded is untrusted:
read back only through ``decode``, which refuses anything but that shape.
Writes only the record commit, its tracking ref and the remote's record ref.
"""
from __future__ import annotations

import json
import re
from urllib.parse import urlsplit, urlunsplit

import pygit2

from ..errors import DataError, UsageError
from . import gitcmd
from .remotes import Remote

REF = "refs/pf/meta/store"
TRACKING = "meta/store"
FILE = "store.json"
MAX_BYTES = 4096
RECORDED = ("git", "lfs", "s3")
_S3_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[A-Za-z0-9!_.*'()/-]*)?$")
_SIG = pygit2.Signature("git-pf", "git-pf@localhost", 0, 0)


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


def _read_commit(git: pygit2.Repository, oid: str, where: str) -> tuple[str, str | None]:
    try:
        commit = git[oid]
        if not isinstance(commit, pygit2.Commit):
            raise KeyError(oid)
        entry = commit.tree[FILE]
        blob = git[entry.id]
        if not isinstance(blob, pygit2.Blob) or len(commit.tree) != 1:
            raise KeyError(FILE)
    except (KeyError, ValueError, pygit2.GitError):
        raise DataError(f"{where} is not a valid store record (expected a commit holding only {FILE})") from None
    return decode(blob.data, where)


def recorded(repo, remote: Remote) -> tuple[str, str | None] | None:
    """What ``remote`` recorded, as last fetched; None when it recorded nothing."""
    ref = repo.git.references.get(remote.tracking(TRACKING))
    if ref is None:
        return None
    return _read_commit(repo.git, str(ref.target), f"the store record of remote '{remote.arg}'")


def write_commit(git: pygit2.Repository, kind: str, url: str | None) -> str:
    blob = git.create_blob(encode(kind, url))
    builder = git.TreeBuilder()
    builder.insert(FILE, blob, pygit2.enums.FileMode.BLOB)
    return str(git.create_commit(None, _SIG, _SIG, f"git-pf store record: {kind}\n", builder.write(), []))


def publish(repo, remote: Remote, kind: str, url: str | None) -> bool:
    """Record ``kind``/``url`` on ``remote`` (before its image refs move); True when it was written."""
    url = without_credentials(url) if url else None
    commit = write_commit(repo.git, kind, url)
    cwd = repo.git.workdir or repo.git_dir
    theirs = gitcmd.ls_remote(repo.git_dir, remote.arg, [REF], cwd=cwd).get(REF)
    if theirs == commit or (theirs is None and kind == "git"):
        written = False  # no record reads as git
    else:
        gitcmd.run(repo.git_dir, ["push", "--no-verify", "--quiet", "--force", remote.arg, f"{commit}:{REF}"],
                   cwd=cwd, env={"GIT_PF_SKIP_PUSH": "1"})
        written = True
    if theirs is not None or kind != "git":
        repo.git.references.create(remote.tracking(TRACKING), pygit2.Oid(hex=commit), force=True)
    return written
