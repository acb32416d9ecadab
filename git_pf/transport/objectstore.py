"""The interface of a remote's object store, as push, fetch, clone and the lazy reader use it.

``ObjectStore`` is what each adapter (``gitstore.GitAdapter``, ``filestore.FileAdapter``,
``lfsstore.LfsAdapter``, ``s3store.S3Adapter``) declares and implements; ``adapters.make``
picks one by the remote's pinned store. Side-store objects go up with ``upload`` and come
down with ``download``; ``has`` says which the remote holds. Defines the interface only.
"""
from __future__ import annotations

from typing import Iterable, Protocol, runtime_checkable


@runtime_checkable
class ObjectStore(Protocol):
    """A remote's object store, seen from this repository."""

    def begin_refresh(self) -> None:
        """Start asking the remote what ``refresh`` learns, where that can run while the caller
        works on (``refresh`` then finishes it); by default nothing."""

    def refresh(self) -> None:
        """Learn what the remote holds now (its index, its record), as needed before ``has``."""

    def load_local(self) -> None:
        """Learn what the remote holds from what was last fetched, without asking the remote."""
        self.refresh()

    def has(self, oids: Iterable[str]) -> set[str]:
        """Those of ``oids`` the remote holds."""
        ...

    def upload(self, store, oids: list[str], progress) -> int:
        """Send ``oids`` from the local side ``store``; the bytes sent."""
        ...

    def download(self, store, oids: list[str], progress) -> None:
        """Fetch ``oids`` into the local side ``store``, each checked against its name."""
        ...
