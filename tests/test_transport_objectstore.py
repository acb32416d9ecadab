"""The object adapters share one interface (``transport.objectstore.ObjectStore``), and the
adapter table makes one of each kind a remote can pin."""
from __future__ import annotations

import subprocess

from git_pf.transport import adapters
from git_pf.transport.adapters.file import FileAdapter
from git_pf.transport.adapters.git import GitAdapter
from git_pf.transport.adapters.lfs import LfsAdapter
from git_pf.transport.objectstore import ObjectStore
from git_pf.transport.remotes import Remote
from git_pf.transport.adapters.s3 import S3Adapter

CLASSES = {"git": GitAdapter, "file": FileAdapter, "lfs": LfsAdapter, "s3": S3Adapter}


def test_every_adapter_declares_the_object_store_interface():
    assert set(adapters.MAKERS) == set(adapters.KINDS) == set(CLASSES)
    for cls in CLASSES.values():
        assert issubclass(cls, ObjectStore)
        for method in ("refresh", "load_local", "has", "upload", "download"):
            assert callable(getattr(cls, method)), (cls.__name__, method)


def test_make_picks_the_pinned_kind(repo, tmp_path):
    bare = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    remote = Remote("origin", str(bare), tmp_path)
    made = adapters.make(repo, remote, adapters.parse("file", "config", "pf.remote.origin.store"))
    assert isinstance(made, FileAdapter) and isinstance(made, ObjectStore)
    assert made.has(["0" * 64]) == set()
