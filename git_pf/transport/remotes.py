"""Naming a remote: a configured name or a URL, its tracking refs, and its object adapter.

Tracking refs live under ``refs/pf/remotes/<key>/`` where ``key`` is the
remote's name (or ``url-<hash>`` for a bare URL): ``heads/*`` mirror the
remote's image branches, ``objects`` its objects index, ``meta/store`` the
adapter it recorded. ``pf.remote.<name>.store`` is read here; ``adapters``
decides what it means. ``check_http`` refuses a plain ``http://`` object store
unless its host is loopback or ``pf.remote.<name>.allowHttp`` is set.
Reads config; writes nothing.
"""
from __future__ import annotations

import hashlib
import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse, urlsplit

import pygit2

from ..core import config
from ..core.errors import UsageError

TRACKING = "refs/pf/remotes/"


@dataclass(frozen=True)
class Remote:
    name: str | None  # the configured name, or None for a bare URL
    url: str
    cwd: Path  # relative URLs resolve against this directory, as for git itself

    @property
    def key(self) -> str:
        if self.name:
            return self.name
        return "url-" + hashlib.sha1(self.url.encode()).hexdigest()[:12]

    @property
    def arg(self) -> str:
        """What to hand git: the name when there is one (so pushurl / insteadOf apply)."""
        return self.name or self.url

    def tracking(self, what: str) -> str:
        return f"{TRACKING}{self.key}/{what}"

    def local_path(self) -> Path | None:
        """The filesystem path of a local remote (a path or file:// URL), else None."""
        if self.url.startswith("file://"):
            return Path(unquote(urlparse(self.url).path))
        if "://" in self.url or re.match(r"^[^/]+:", self.url):
            return None
        return (self.cwd / self.url).resolve()


def workdir(repo) -> Path:
    return Path(repo.git.workdir) if repo.git.workdir else repo.git_dir


def names(repo) -> list[str]:
    return [r.name for r in repo.git.remotes]


def resolve(repo, arg: str | None) -> Remote:
    """The remote ``arg`` names (default: origin, else the only remote)."""
    known = names(repo)
    cwd = workdir(repo)
    if arg is None:
        if "origin" in known:
            arg = "origin"
        elif len(known) == 1:
            arg = known[0]
        else:
            raise UsageError("no remote given and no 'origin' (name one: git pf push REMOTE)")
    if arg in known:
        url = config.get_str(repo.git, f"remote.{arg}.url")
        if not url:
            raise UsageError(f"remote '{arg}' has no url")
        return Remote(arg, url, cwd)
    if "://" in arg or ":" in arg or os.path.isdir(cwd / arg):
        return Remote(None, arg, cwd)
    raise UsageError(f"no such remote '{arg}' (not a configured remote nor a URL)")


def store_setting(repo, remote: Remote) -> str | None:
    """``pf.remote.<name>.store`` as configured, or None (then the recorded adapter, else git)."""
    value = config.get_str(repo.git, f"pf.remote.{remote.name}.store") if remote.name else None
    return value.strip() if value and value.strip() else None


def file_root(repo, remote: Remote, setting: str) -> Path:
    """The directory of a ``file`` adapter: ``file:<dir>``, or the local remote's own ``pf/objects``."""
    _, _, explicit = setting.partition(":")
    if explicit:
        return (workdir(repo) / os.path.expanduser(explicit)).resolve()
    path = remote.local_path()
    if path is None:
        raise UsageError(f"pf.remote.{remote.name}.store=file needs a local remote or file:<directory>")
    git_dir = path / ".git" if (path / ".git").is_dir() else path
    return git_dir / "pf" / "objects"


def _loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_http(repo, remote: Remote, url: str, what: str) -> None:
    """Refuse ``url`` (an object store's endpoint) when it is plain ``http://`` to a host that
    is not loopback and ``pf.remote.<name>.allowHttp`` is not set: one clear UsageError line."""
    parts = urlsplit(url)
    if parts.scheme != "http" or _loopback(parts.hostname or ""):
        return
    if remote.name:
        try:
            if repo.git.config.get_bool(f"pf.remote.{remote.name}.allowHttp"):
                return
        except KeyError:
            pass
        except (ValueError, pygit2.GitError):
            raise UsageError(f"pf.remote.{remote.name}.allowHttp must be a boolean (true/false)") from None
    allow = f"git config pf.remote.{remote.name}.allowHttp true" if remote.name else \
        "add the remote by name (git remote add) and set pf.remote.<name>.allowHttp"
    try:
        where = (parts.hostname or "") + (f":{parts.port}" if parts.port else "")
    except ValueError:  # a port that is not a number
        where = parts.hostname or ""
    raise UsageError(f"remote '{remote.arg}': {what} http://{where}{parts.path} is plain http "
                     f"(objects and logins would travel unencrypted); use https, or allow it: {allow}")
