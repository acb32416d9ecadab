"""Choosing the object adapter of a remote: the store pinned in local config, never the remote's word.

``pf.remote.<name>.store`` takes ``git`` | ``file`` | ``file:<dir>`` | ``lfs`` |
``lfs:<url>`` | ``s3://<bucket>[/<prefix>]``: that setting is the pin, written
by the user, by ``git pf clone`` (the record it found at clone time) or by
``git pf remote-store <r> --accept``. The record a remote keeps
(``storerecord``, as last fetched) never changes where objects go: one that
names another store than the pin is reported (``record_note``) and not used;
without a pin, a record naming the git adapter (or none) means git, and one
naming another store is refused until accepted. Every adapter is an
``ObjectStore`` (``objectstore``: ``refresh()``, ``load_local()``, ``has(oids) -> set``,
``upload(store, oids, progress) -> int``, ``download(store, oids, progress)``), made by
``make`` from the ``MAKERS`` table; each adapter's module is imported only when used, the
s3 one as ``git_pf.transport.adapters.s3.S3Adapter(repo, remote, url)``.
Reads config and refs; writes only the pin (``configure``, ``accept``).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ...core.errors import DataError, UsageError
from .. import remotes, storerecord
from ..objectstore import ObjectStore
from ..remotes import Remote

KINDS = ("git", "file", "lfs", "s3")
_HINT = "use git, file, file:<dir>, lfs, lfs:<url> or s3://<bucket>/<prefix>"


@dataclass(frozen=True)
class Choice:
    kind: str  # one of KINDS
    url: str | None  # file:<dir>'s directory, lfs:<url>'s endpoint, the s3:// URL; None: derived
    source: str  # "config", "recorded" or "default"

    @property
    def value(self) -> str:
        """The setting that chooses this adapter (``pf.remote.<name>.store``)."""
        if self.kind == "s3":
            return str(self.url)
        return f"{self.kind}:{self.url}" if self.url else self.kind

    def to_json(self) -> dict:
        return {"adapter": self.kind, "url": self.url, "value": self.value, "source": self.source}


def parse(value: str, source: str = "config", where: str = "pf.remote.<name>.store") -> Choice:
    """The adapter a setting names; one clear UsageError line when it names none."""
    value = value.strip()
    kind, sep, rest = value.partition(":")
    if value in ("git", "file", "lfs"):
        return Choice(value, None, source)
    if kind in ("file", "lfs") and sep and rest:
        if kind == "lfs" and not rest.startswith(("http://", "https://")):
            raise UsageError(f"{where}: lfs:<url> needs an http:// or https:// URL, not '{rest}'")
        return Choice(kind, rest, source)
    if kind == "s3" and rest.startswith("//"):
        storerecord.check_s3_url(value, where)
        return Choice("s3", value, source)
    raise UsageError(f"{where}: unknown adapter '{value}' ({_HINT})")


def record_of(repo, remote: Remote) -> tuple[Choice | None, str | None]:
    """``(what the remote records, as last fetched, or None; why that record is not valid, or None)``."""
    try:
        found = storerecord.recorded(repo, remote)
    except DataError as e:
        return None, str(e)
    return (Choice(found[0], found[1], "recorded") if found else None), None


def _unconfirmed(repo, remote: Remote, recorded: Choice) -> str:
    return (f"remote '{remote.arg}' records its objects at {describe(repo, remote, recorded)}, which this "
            f"repository has not confirmed; to use it: git pf remote-store {remote.name or 'REMOTE'} --accept")


def choice(repo, remote: Remote, unconfirmed: str = "refuse") -> Choice:
    """The adapter ``remote`` uses: the pin (config); without one, git, unless the remote
    records another store: then a UsageError line (``unconfirmed="refuse"``) or git
    (``"ignore"``: a fetch learns the git index and reports the record)."""
    setting = remotes.store_setting(repo, remote) if remote.name else None
    if setting is not None:
        return parse(setting, "config", f"pf.remote.{remote.name}.store")
    recorded, _ = record_of(repo, remote)
    if recorded is None or recorded.kind == "git":
        return Choice("git", None, "default" if recorded is None else "recorded")
    if unconfirmed == "refuse":
        raise UsageError(_unconfirmed(repo, remote, recorded))
    return Choice("git", None, "default")


def _lfs_endpoint(repo, remote: Remote, chosen: Choice) -> str:
    from .. import lfsauth

    if chosen.source == "recorded":  # a record's null url: derived from the remote's URL, as a clone does
        return (chosen.url or lfsauth.derive(remote.url) or "").rstrip("/")
    try:
        return lfsauth.endpoint(repo, remote, chosen.url)
    except UsageError:
        return (chosen.url or "").rstrip("/")


def describe(repo, remote: Remote, chosen: Choice) -> str:
    """Where ``chosen`` puts objects, in words for one line (a recorded URL cleaned and cut short)."""
    from ..lfsauth import clean

    if chosen.kind == "git":
        return f"the git remote '{remote.arg}'"
    if chosen.kind == "file":
        try:
            return f"the directory {remotes.file_root(repo, remote, chosen.value)}"
        except UsageError:
            return "a file store"
    if chosen.kind == "lfs":
        endpoint = _lfs_endpoint(repo, remote, chosen)
        return f"the lfs server {clean(storerecord.without_credentials(endpoint))}" if endpoint else \
            "an lfs server"
    return f"the s3 bucket {clean(str(chosen.url))}"


def _same(repo, remote: Remote, pin: Choice, recorded: Choice) -> bool:
    """Whether ``recorded`` names the store ``pin`` uses."""
    if pin.kind != recorded.kind:
        return False
    if pin.kind == "lfs":
        return _lfs_endpoint(repo, remote, pin) == _lfs_endpoint(repo, remote, recorded)
    return (pin.url or "").rstrip("/") == (recorded.url or "").rstrip("/")


def record_note(repo, remote: Remote) -> str | None:
    """One line when the remote's record (as last fetched) is not what objects use: not
    valid, naming another store than the pin, or naming a store not yet confirmed."""
    recorded, problem = record_of(repo, remote)
    if problem is None and recorded is not None:
        where = f"the store record of remote '{remote.arg}'"
        try:
            storerecord.read_listings(repo.git, storerecord.tracked(repo, remote), where)
        except DataError as e:
            problem = str(e)
    if problem is not None:
        return f"warning: {problem}; ignored"
    if recorded is None:
        return None
    name = remote.name or "REMOTE"
    setting = remotes.store_setting(repo, remote) if remote.name else None
    if setting is None:
        return None if recorded.kind == "git" else f"note: {_unconfirmed(repo, remote, recorded)}"
    try:
        pin = parse(setting, "config", f"pf.remote.{remote.name}.store")
    except UsageError:
        return None  # the bad setting is said where it is used
    if _same(repo, remote, pin, recorded):
        return None
    return (f"warning: remote '{remote.arg}' records its objects at {describe(repo, remote, recorded)}; not used: "
            f"they stay at {describe(repo, remote, pin)} (pf.remote.{name}.store; to switch: "
            f"git pf remote-store {name} --accept)")


def for_remote(repo, remote: Remote):
    """The adapter object of ``remote`` (see ``choice``)."""
    return make(repo, remote, choice(repo, remote))


def _git(repo, remote: Remote, chosen: Choice) -> ObjectStore:
    from .git import GitAdapter

    return GitAdapter(repo, remote)


def _file(repo, remote: Remote, chosen: Choice) -> ObjectStore:
    from .file import FileAdapter

    return FileAdapter(remotes.file_root(repo, remote, chosen.value))


def _lfs(repo, remote: Remote, chosen: Choice) -> ObjectStore:
    from .lfs import LfsAdapter

    return LfsAdapter(repo, remote, chosen.url)


def _s3(repo, remote: Remote, chosen: Choice) -> ObjectStore:
    try:
        module = importlib.import_module(".s3", __package__)
    except ImportError as e:
        raise UsageError(f"the s3 adapter is not available here ({e})") from None
    return module.S3Adapter(repo, remote, chosen.url)


# kind -> how its adapter is made; each module is imported only when its kind is used
MAKERS = {"git": _git, "file": _file, "lfs": _lfs, "s3": _s3}


def make(repo, remote: Remote, chosen: Choice) -> ObjectStore:
    """The object store ``chosen`` names for ``remote``."""
    maker = MAKERS.get(chosen.kind)
    if maker is None:
        raise UsageError(f"unknown adapter '{chosen.kind}' ({_HINT})")
    return maker(repo, remote, chosen)


def configure(repo, remote: Remote, value: str) -> Choice:
    """Pin ``pf.remote.<name>.store`` to ``value`` (checked first); the choice it makes."""
    if not remote.name:
        raise UsageError(f"'{remote.arg}' is not a configured remote (git remote add NAME URL first)")
    chosen = parse(value, "config", f"pf.remote.{remote.name}.store")
    if chosen.kind == "file":
        remotes.file_root(repo, remote, chosen.value)  # file needs a local remote: refuse now, not at push
    if chosen.kind == "lfs" and (chosen.url or remote.url.startswith("http://")):
        from .. import lfsauth

        lfsauth.endpoint(repo, remote, chosen.url)  # plain http: refused now, not at push
    repo.git.config[f"pf.remote.{remote.name}.store"] = chosen.value
    return chosen


def accept(repo, remote: Remote) -> Choice:
    """Pin the store the remote records (as last fetched); the choice it makes."""
    recorded, problem = record_of(repo, remote)
    if problem is not None:
        raise DataError(problem)
    if recorded is None:
        raise UsageError(f"remote '{remote.arg}' records no object store (git pf fetch {remote.arg} first)")
    return configure(repo, remote, recorded.value)
