"""git pf install / uninstall: hooks chain (never clobber), remote config, plain git push and fetch."""
from __future__ import annotations

import os
import stat

from transport_helpers import bare, origin_of, pf, sh, source_repo, tree_files

USER_HOOK = """#!/bin/sh
cat >> "$(git rev-parse --git-dir)/user-hook.log"
if [ -e VETO ]; then echo "user hook says no" >&2; exit 1; fi
exit 0
"""


def _user_hook(directory, name="pre-push"):
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(USER_HOOK)
    os.chmod(path, 0o750)
    return path


def _remote_refs(bare_repo):
    return set(sh("git", "for-each-ref", "--format=%(refname)", cwd=bare_repo).stdout.split())


def test_install_chains_existing_hook_twice_is_noop_uninstall_restores_exactly(tmp_path):
    a, _ = source_repo(tmp_path)
    sh("git", "remote", "add", "origin", bare(tmp_path / "r.git"), cwd=a)
    sh("git", "config", "remote.origin.push", "refs/heads/keep:refs/heads/keep", cwd=a)
    hook = _user_hook(a / ".git" / "hooks")
    config_before = (a / ".git" / "config").read_bytes()

    out = pf("install", "--json", cwd=a).stdout
    assert '"pre-push"' in out
    assert (a / ".git" / "hooks" / "pre-push.pf-chained").read_text() == USER_HOOK
    ours = (a / ".git" / "hooks" / "pre-push").read_text()
    assert "git-pf-hook" in ours
    config = sh("git", "config", "--get-all", "remote.origin.push", cwd=a).stdout.split()
    # the user had a push refspec, so HEAD is not added
    assert config == ["refs/heads/keep:refs/heads/keep", "refs/pf/heads/*:refs/pf/heads/*", "refs/pf/tags/*:refs/pf/tags/*",
                      "refs/pf/blame/*:refs/pf/blame/*"]
    fetch = sh("git", "config", "--get-all", "remote.origin.fetch", cwd=a).stdout.split()
    assert "+refs/pf/blame/*:refs/pf/remotes/origin/blame/*" in fetch  # never into the local blame runs
    snapshot = {p.name: p.read_bytes() for p in (a / ".git" / "hooks").iterdir()}
    config_after = (a / ".git" / "config").read_bytes()

    assert "nothing changed" in pf("install", cwd=a).stdout
    assert {p.name: p.read_bytes() for p in (a / ".git" / "hooks").iterdir()} == snapshot
    assert (a / ".git" / "config").read_bytes() == config_after

    pf("uninstall", cwd=a)
    assert (a / ".git" / "config").read_bytes() == config_before
    assert hook.read_text() == USER_HOOK and stat.S_IMODE(hook.stat().st_mode) == 0o750
    assert not (a / ".git" / "hooks" / "pre-push.pf-chained").exists()


def test_core_hooks_path_is_honoured(tmp_path):
    a, _ = source_repo(tmp_path)
    sh("git", "config", "core.hooksPath", ".githooks", cwd=a)
    _user_hook(a / ".githooks")
    pf("install", cwd=a)
    assert "git-pf-hook" in (a / ".githooks" / "pre-push").read_text()
    assert (a / ".githooks" / "pre-push.pf-chained").read_text() == USER_HOOK
    assert not (a / ".git" / "hooks" / "pre-push").exists()
    pf("uninstall", cwd=a)
    assert (a / ".githooks" / "pre-push").read_text() == USER_HOOK
    assert sorted(p.name for p in (a / ".githooks").iterdir()) == ["pre-push"]


def test_plain_git_push_and_fetch_carry_images_and_user_hook_keeps_its_veto(tmp_path):
    a, sb = source_repo(tmp_path)
    (a / "README").write_text("code\n")
    sh("git", "add", "README", cwd=a)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "code", cwd=a)
    remote = origin_of(a, tmp_path)
    _user_hook(a / ".git" / "hooks")
    pf("install", cwd=a)

    (a / "VETO").write_text("")
    proc = sh("git", "push", cwd=a, check=False)
    assert proc.returncode != 0 and "user hook says no" in proc.stderr
    assert _remote_refs(remote) == set()  # the veto stopped the upload too

    (a / "VETO").unlink()
    sh("git", "push", cwd=a)
    refs = _remote_refs(remote)
    assert {"refs/heads/master", "refs/pf/heads/main", "refs/pf/objects"} <= refs, refs
    assert "refs/pf/heads/main" in (a / ".git" / "user-hook.log").read_text()

    # a plain clone + install + plain fetch brings the images; checkout pulls objects lazily
    b = tmp_path / "b"
    sh("git", "clone", "-q", f"file://{remote}", b)
    pf("install", cwd=b)
    sh("git", "fetch", "-q", cwd=b)
    assert "refs/pf/remotes/origin/heads/main" in sh("git", "for-each-ref", cwd=b).stdout
    pf("checkout", "refs/pf/remotes/origin/heads/main", "--into", tmp_path / "c", cwd=b)
    assert tree_files(tmp_path / "c") == tree_files(sb)


def test_skip_push_env_pushes_refs_without_objects(tmp_path):
    a, _ = source_repo(tmp_path)
    remote = origin_of(a, tmp_path)
    sh("git", "config", "remote.origin.push", "refs/pf/heads/*:refs/pf/heads/*", cwd=a)
    pf("install", cwd=a)
    sh("git", "push", cwd=a, env={"GIT_PF_SKIP_PUSH": "1"})
    refs = _remote_refs(remote)
    assert "refs/pf/heads/main" in refs and "refs/pf/objects" not in refs
    sh("git", "push", "origin", "+refs/pf/heads/main:refs/pf/heads/other", cwd=a)
    assert "refs/pf/objects" in _remote_refs(remote)
