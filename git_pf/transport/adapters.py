"""Choosing the object adapter of a remote: its config, else what the remote recorded, else git.

``pf.remote.<name>.store`` takes ``git`` | ``file`` | ``file:<dir>`` | ``lfs`` |
``lfs:<url>`` | ``s3://<bucket>[/<prefix>]``. Without it, the adapter the remote
recorded when it was pushed to (``storerecord``, as last fetched) is used, so
a clone needs no flags; without either, ``git``. Every adapter offers
``refresh()``, ``load_local()``, ``has(oids) -> set``, ``upload(store, oids,
progress) -> int`` and ``download(store, oids, progress)``; the lfs and s3
adapters are imported only when used, the s3 one as
``git_pf.transport.s3store.S3Adapter(repo, remote, url)``.
Reads config and refs; writes nothing.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass

from ..errors import UsageError
from . import remotes, storerecord
from .remotes import Remote

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


def choice(repo, remote: Remote) -> Choice:
    """The adapter ``remote`` uses: config, else the recorded one, else git."""
    setting = remotes.store_setting(repo, remote) if remote.name else None
    if setting is not None:
        return parse(setting, "config", f"pf.remote.{remote.name}.store")
    recorded = storerecord.recorded(repo, remote)
    if recorded is not None:
        kind, url = recorded
        return Choice(kind, url, "recorded")
    return Choice("git", None, "default")


def for_remote(repo, remote: Remote):
    """The adapter object of ``remote`` (see ``choice``)."""
    return make(repo, remote, choice(repo, remote))


def make(repo, remote: Remote, chosen: Choice):
    if chosen.kind == "git":
        from .gitstore import GitAdapter
        return GitAdapter(repo, remote)
    if chosen.kind == "file":
        from .filestore import FileAdapter
        return FileAdapter(remotes.file_root(repo, remote, chosen.value))
    if chosen.kind == "lfs":
        from .lfsstore import LfsAdapter
        return LfsAdapter(repo, remote, chosen.url)
    if chosen.kind == "s3":
        try:
            module = importlib.import_module(".s3store", __package__)
        except ImportError as e:
            raise UsageError(f"the s3 adapter is not available here ({e})") from None
        return module.S3Adapter(repo, remote, chosen.url)
    raise UsageError(f"unknown adapter '{chosen.kind}' ({_HINT})")


def configure(repo, remote: Remote, value: str) -> Choice:
    """Set ``pf.remote.<name>.store`` to ``value`` (checked first); the choice it makes."""
    if not remote.name:
        raise UsageError(f"'{remote.arg}' is not a configured remote (git remote add NAME URL first)")
    chosen = parse(value, "config", f"pf.remote.{remote.name}.store")
    if chosen.kind == "file":
        remotes.file_root(repo, remote, chosen.value)  # file needs a local remote: refuse now, not at push
    repo.git.config[f"pf.remote.{remote.name}.store"] = chosen.value
    return chosen
