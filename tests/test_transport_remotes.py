"""Images travel through every kind of real git remote: push from A, clone into B, checkout into C."""
from __future__ import annotations

import pytest

from transport_helpers import pf, remote_of, sh, source_repo, tree_files

KINDS = ["path", "file", "daemon", "http-backend", "dulwich"]


@pytest.mark.parametrize("kind", KINDS)
def test_push_clone_checkout_byte_identical(kind, tmp_path):
    a, sb = source_repo(tmp_path)
    with remote_of(kind, tmp_path) as (url, bare):
        sh("git", "remote", "add", "origin", url, cwd=a)
        pf("push", "origin", "main", cwd=a)
        heads = sh("git", "for-each-ref", "--format=%(refname)", cwd=bare).stdout.split()
        assert "refs/pf/heads/main" in heads and "refs/pf/objects" in heads
        pf("clone", url, tmp_path / "b", cwd=tmp_path)
        b = tmp_path / "b"
        # nothing large was transferred by the clone itself: objects come on checkout
        assert not any((b / ".git" / "pf" / "objects").rglob("*/*")) or \
            all(p.parent.name == "tmp" for p in (b / ".git" / "pf" / "objects").rglob("*") if p.is_file())
        pf("checkout", "main", "--into", tmp_path / "c", cwd=b)
    assert tree_files(tmp_path / "c") == tree_files(sb)
    assert pf("fsck", cwd=b).returncode == 0
