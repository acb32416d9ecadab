"""Signed images and pf.verify (docs/security.md, "Signed images"): keys made here with ssh-keygen,
gpg and gpgsm (tests/signing_keys.py), commits checked with git's own verify-commit, remotes as real
bare repositories."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

from git_pf import Repo
from git_pf.testing.fakellm import FakeLLM

from conftest import git_fsck_clean
from runs_helpers import SCRIPT, record, report, step_ids
from signing_keys import PROGRAMS, CertificateAuthority, available, make_home
from test_integrations_claude_code import claude, project  # noqa: F401  (fixtures)
from transport_helpers import bare, pf, sh


def keypair(tmp: Path, name: str) -> tuple[Path, str]:
    key = tmp / "keys" / name
    key.parent.mkdir(exist_ok=True)
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key)
    kind, blob = (key.parent / f"{name}.pub").read_text().split()[:2]
    return key, f"{kind} {blob}"


def user(tmp: Path, name: str, key: Path | str | None, allowed: Path | None = None, sign: bool = True,
         fmt: str = "ssh") -> Path:
    """A git-pf repository at tmp/name signing in ``fmt`` with ``key`` (None: the committer's
    identity) and, for ssh, trusting ``allowed``."""
    root = tmp / name
    pf("init", root, cwd=tmp)
    for k, v in (("user.name", name), ("user.email", f"{name}@example.org"), ("gpg.format", fmt),
                 ("user.signingKey", key), ("gpg.ssh.allowedSignersFile", allowed),
                 ("pf.sign", "true" if sign else "false")):
        if v is not None:
            sh("git", "config", k, str(v), cwd=root)
    return root


def snap(root: Path, files: dict, *extra: str, name: str = "main", env: dict | None = None) -> str:
    box = root.parent / f"{root.name}-box"
    box.mkdir(exist_ok=True)
    for rel, text in files.items():
        (box / rel).write_text(text)
    return pf("snapshot", "--fs-root", box, "--name", name, *extra, cwd=root, env=env).stdout.strip()


def signed(root: Path, rev: str, env: dict | None = None) -> bool:
    return sh("git", "verify-commit", rev, cwd=root, env=env, check=False).returncode == 0


def forge(root: Path, signed_oid: str, tree_of: str, ref: str = "forged") -> str:
    """``signed_oid``'s commit, signature and all, over ``tree_of``'s tree, at refs/pf/heads/``ref``."""
    raw = sh("git", "cat-file", "commit", signed_oid, cwd=root).stdout
    other_tree = sh("git", "rev-parse", f"{tree_of}^{{tree}}", cwd=root).stdout.strip()
    forged_raw = raw.replace(raw.split("\n", 1)[0], f"tree {other_tree}", 1)
    forged = sh("git", "hash-object", "-t", "commit", "-w", "--stdin", cwd=root, input=forged_raw).stdout.strip()
    sh("git", "update-ref", f"refs/pf/heads/{ref}", forged, cwd=root)
    return forged


@pytest.fixture
def keys(tmp_path):
    alice, alice_pub = keypair(tmp_path, "alice")
    mallory, mallory_pub = keypair(tmp_path, "mallory")
    allowed = tmp_path / "allowed_signers"
    allowed.write_text(f"alice@example.org {alice_pub}\n")
    return {"alice": alice, "mallory": mallory, "allowed": allowed}


def test_a_signed_snapshot_is_accepted_by_git_and_by_git_pf_verify(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"], sign=False)
    plain = snap(root, {"a.txt": "1"})
    out = pf("verify", "main", cwd=root, check=False)
    assert out.returncode == 1 and out.stdout == f"{plain[:12]} untrusted: unsigned\n"
    oid = snap(root, {"a.txt": "2"}, "-S")
    assert signed(root, oid) and not signed(root, plain)
    shown = sh("git", "log", "--show-signature", "-1", oid, cwd=root).stdout
    assert 'Good "git" signature for alice@example.org' in shown
    out = pf("verify", "main", cwd=root)
    assert out.stdout.startswith(f"{oid[:12]} trusted: good signature by alice@example.org (ssh)")
    # the unsigned image below it is covered by its signed descendant on the same line; alone it is not
    below = json.loads(pf("verify", plain, "--json", cwd=root).stdout)[0]
    assert below["status"] == "unsigned" and below["trusted"] and below["via"] == oid
    logged = json.loads(pf("log", "--show-signature", "--json", cwd=root).stdout)
    assert [(i["id"], i["signature"]["status"]) for i in logged] == [(oid, "good"), (plain, "unsigned")]
    assert "Signature: good signature by alice@example.org (ssh)" in pf("show", "--show-signature", cwd=root).stdout
    git_fsck_clean(root)


def test_require_refuses_an_image_an_unknown_key_pushed_and_writes_nothing(tmp_path, keys):
    remote = bare(tmp_path / "shared.git")
    mallory = user(tmp_path, "mallory", keys["mallory"], keys["allowed"])
    sh("git", "remote", "add", "origin", remote, cwd=mallory)
    snap(mallory, {"a.txt": "evil"})
    from langgraph.checkpoint.base import empty_checkpoint

    from git_pf.integrations.langgraph import PfSaver

    PfSaver(Repo.open(mallory)).put({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}},
                                    empty_checkpoint(), {"source": "input", "step": -1}, {})
    pf("push", "origin", "--all", "-q", cwd=mallory)

    alice = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    sh("git", "remote", "add", "origin", remote, cwd=alice)
    mine = snap(alice, {"a.txt": "good"})
    sh("git", "config", "pf.verify", "require", cwd=alice)
    pf("fetch", "origin", cwd=alice)
    theirs = "remotes/origin/heads/main"
    pf("branch", "mal", theirs, cwd=alice)  # run goes on from a local branch
    before = sh("git", "for-each-ref", "refs/pf", cwd=alice).stdout
    for args in (("checkout", theirs, "--into", tmp_path / "out"),
                 ("merge", theirs),
                 ("mount", theirs, tmp_path / "mnt"),
                 ("replay", theirs, "--", sys.executable, "-c", "pass"),
                 ("run", "mal", "--", sys.executable, "-c", "pass"),
                 ("blame", theirs, "--success-re", "done", "--", sys.executable, "-c", "pass"),
                 ("report", theirs, "-o", tmp_path / "report.html"),
                 ("fork", theirs, "-n", "1")):
        out = pf(*args, cwd=alice, check=False)
        assert out.returncode == 3, (args, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and "is not trusted: unknown key" in lines[0] and "pf.verify=require" in lines[0], args
    assert not (tmp_path / "out").exists() and not (tmp_path / "report.html").exists() and not any((tmp_path / "mnt").iterdir() if (tmp_path / "mnt").exists() else [])
    assert sh("git", "for-each-ref", "refs/pf", cwd=alice).stdout == before
    assert not list((alice / ".git" / "pf" / "mounts").glob("*")) if (alice / ".git" / "pf" / "mounts").exists() else True
    # the LangGraph saver never decodes the fetched checkpoint
    from git_pf.image.verify import Untrusted

    saver = PfSaver(Repo.open(alice))
    with pytest.raises(Untrusted, match="unknown key"):
        saver.get_tuple({"configurable": {"thread_id": "t1", "checkpoint_ns": ""}})
    assert sh("git", "for-each-ref", "refs/pf", cwd=alice).stdout == before
    # its own signed image is used as ever; under warn the fetched one is used with one warning line
    pf("checkout", mine, "--into", tmp_path / "mine", cwd=alice)
    sh("git", "config", "pf.verify", "warn", cwd=alice)
    out = pf("checkout", theirs, "--into", tmp_path / "warned", cwd=alice)
    assert "warning: image" in out.stderr and (tmp_path / "warned" / "a.txt").read_text() == "evil"
    # per remote: pf.verify off, pf.remote.origin.verify require refuses what origin's refs reach
    sh("git", "config", "pf.verify", "off", cwd=alice)
    sh("git", "config", "pf.remote.origin.verify", "require", cwd=alice)
    assert pf("checkout", theirs, "--into", tmp_path / "o2", cwd=alice, check=False).returncode == 3
    pf("checkout", mine, "--into", tmp_path / "mine2", cwd=alice)


def test_a_signature_copied_onto_a_changed_tree_is_a_bad_signature(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    first = snap(root, {"a.txt": "1"})
    good = snap(root, {"a.txt": "2"})
    forged = forge(root, good, first)
    assert not signed(root, forged)
    out = pf("verify", "forged", cwd=root, check=False)
    assert out.returncode == 1 and "untrusted: bad signature by alice@example.org" in out.stdout
    listed = {v["id"]: v for v in json.loads(pf("verify", "--all", "--json", cwd=root, check=False).stdout)}
    assert listed[forged]["status"] == "bad signature" and not listed[forged]["trusted"]
    assert listed[good]["trusted"] and listed[first]["trusted"] and listed[first]["status"] == "good"
    sh("git", "config", "pf.verify", "require", cwd=root)
    out = pf("checkout", "forged", "--into", tmp_path / "x", cwd=root, check=False)
    assert out.returncode == 3 and "bad signature" in out.stderr and not (tmp_path / "x").exists()
    out = pf("fsck", cwd=root, check=False)
    assert out.returncode == 1 and f"error: image {forged[:12]} is not trusted: bad signature" in out.stdout


def test_record_steps_merges_continue_and_blame_verdicts_are_signed(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    with FakeLLM(SCRIPT) as fake:
        out = record(pf, root, fake, "openai.chat", tmp_path / "sb")
    assert report(out.stdout)["steps"] == 5
    steps = step_ids(root, "run")
    assert sorted(steps) == [0, 1, 2, 3, 4, 5] and all(signed(root, oid) for oid in steps.values())
    assert signed(root, "refs/pf/heads/run")
    # a merge, and a conflicted merge finished with --continue
    base = snap(root, {"a.txt": "base\n"}, name="m")
    pf("branch", "side", base, cwd=root)
    snap(root, {"a.txt": "ours\n"}, name="m")
    snap(root, {"a.txt": "theirs\n"}, name="side")
    pf("switch", "m", cwd=root)
    done = pf("merge", "side", "--checkout", tmp_path / "resolve", cwd=root, check=False)
    assert done.returncode == 1, done.stderr
    (tmp_path / "resolve" / "a.txt").write_text("both\n")
    pf("merge", "--continue", tmp_path / "resolve", cwd=root)
    assert len(Repo.open(root).resolve("m").parents) == 2 and signed(root, "refs/pf/heads/m")
    snap(root, {"b.txt": "1"}, name="x")
    pf("branch", "y", "x", cwd=root)
    snap(root, {"c.txt": "1"}, name="y")
    pf("merge", "y", "--into", "x", "--no-ff", cwd=root)
    assert signed(root, "refs/pf/heads/x")
    # a blame verdict is its own signed commit
    from git_pf.blame import store

    repo = Repo.open(root)
    verdict = store.write_verdict(repo.git, "run-1", 2, 0, steps[5], store.OUTCOMES[0], "still failing", 0.0)
    assert signed(root, verdict)


def test_claude_code_hook_steps_are_signed(tmp_path, keys, claude):
    from test_integrations_claude_code import _session

    for k, v in (("gpg.format", "ssh"), ("user.signingKey", str(keys["alice"])), ("pf.sign", "true"),
                 ("gpg.ssh.allowedSignersFile", str(keys["allowed"]))):
        sh("git", "config", k, v, cwd=claude.project)
    _session(claude)
    ids = sh("git", "rev-list", "refs/pf/heads/cc/" + claude.sid, cwd=claude.project).stdout.split()
    assert len(ids) == 6 and all(signed(claude.project, oid) for oid in ids)


def test_bad_signing_and_verification_input_is_one_line_and_no_image(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    tip = snap(root, {"a.txt": "1"})
    for key, value, expected in (("user.signingKey", str(tmp_path / "nokey"), "does not exist"),
                                 ("gpg.ssh.program", "false", "failed"),
                                 ("gpg.ssh.program", str(tmp_path / "absent-program"), "not found")):
        sh("git", "config", key, value, cwd=root)
        out = pf("snapshot", "--fs-root", tmp_path / "alice-box", "--allow-empty", cwd=root, check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and expected in lines[0], out.stderr
        assert sh("git", "rev-parse", "refs/pf/heads/main", cwd=root).stdout.strip() == tip
        sh("git", "config", "--unset", key, cwd=root)
        if key == "user.signingKey":
            sh("git", "config", key, str(keys["alice"]), cwd=root)
    # a recorded run writes its step 0 image, signed, before the agent starts: a missing key stops it there
    sh("git", "config", "user.signingKey", str(tmp_path / "nokey"), cwd=root)
    with FakeLLM(SCRIPT) as fake:
        out = record(pf, root, fake, "openai.chat", tmp_path / "sb", check=False)
        assert fake.requests == []
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1 and "does not exist" in lines[0], out.stderr
    assert sh("git", "rev-parse", "-q", "--verify", "refs/pf/heads/run", cwd=root, check=False).returncode == 1
    sh("git", "config", "user.signingKey", str(keys["alice"]), cwd=root)
    keys["allowed"].write_text("alice@example.org not-a-key-type AAAA\n")
    sh("git", "config", "pf.verify", "require", cwd=root)
    for args in (("verify", "main"), ("checkout", "main", "--into", tmp_path / "x")):
        out = pf(*args, cwd=root, check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "line 1 does not parse" in lines[0], out.stderr


def test_verified_images_are_cached_under_the_trust_settings(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    oid = snap(root, {"a.txt": "1"})
    sh("git", "config", "pf.verify", "require", cwd=root)
    pf("checkout", oid, "--into", tmp_path / "one", cwd=root)
    cached = list((root / ".git" / "pf" / "verified").iterdir())
    assert len(cached) == 1 and cached[0].read_text().startswith(oid)
    # the key is no longer trusted: the cache of the old settings does not count
    pub = keys["allowed"].read_text().split(" ", 1)[1]
    keys["allowed"].write_text("")
    out = pf("checkout", oid, "--into", tmp_path / "two", cwd=root, check=False)
    assert out.returncode == 3 and "unknown key" in out.stderr
    # a key that stopped being valid before the image was signed: expired
    keys["allowed"].write_text(f'alice@example.org valid-before="20200101" {pub}')
    out = pf("checkout", oid, "--into", tmp_path / "three", cwd=root, check=False)
    assert out.returncode == 3 and "is not trusted: expired by alice@example.org" in out.stderr


@pytest.fixture
def gpg_homes(tmp_path):
    """Makes GnuPG homes with one key each (tests/signing_keys.py); their agents end with the test."""
    homes = []

    def make(name: str, fmt: str, valid: tuple[str, str] | None = None, cn: str = ""):
        if not available(fmt):
            pytest.skip(f"{PROGRAMS[fmt]} is not installed (make sysdeps)")
        homes.append(make_home(tmp_path, name, fmt, valid, cn))
        return homes[-1]

    yield make
    for home in homes:
        home.close()


@pytest.mark.parametrize("fmt", ["openpgp", "x509"])
def test_gpg_and_gpgsm_signatures_are_made_checked_and_trusted_as_git_does(tmp_path, gpg_homes, fmt):
    alice, mallory = gpg_homes("alice", fmt), gpg_homes("mallory", fmt)
    # mallory pushes an unsigned image and one signed with her own key
    remote = bare(tmp_path / "shared.git")
    theirs_repo = user(tmp_path, "mallory", mallory.email, sign=False, fmt=fmt)
    sh("git", "remote", "add", "origin", remote, cwd=theirs_repo)
    snap(theirs_repo, {"a.txt": "plain"}, name="plain", env=mallory.env)
    theirs = snap(theirs_repo, {"a.txt": "evil"}, "-S", env=mallory.env)
    pf("push", "origin", "--all", "-q", cwd=theirs_repo, env=mallory.env)

    root = user(tmp_path, "alice", None, fmt=fmt)
    sh("git", "remote", "add", "origin", remote, cwd=root)
    if fmt == "x509":  # as for git commit -S, the committer's "name <email>" names no certificate
        out = pf("snapshot", "--fs-root", tmp_path, "--name", "none", cwd=root, env=alice.env, check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 2 and len(lines) == 1 and "set user.signingKey" in lines[0], out.stderr
        assert sh("git", "rev-parse", "-q", "--verify", "refs/pf/heads/none", cwd=root, check=False).returncode == 1
        sh("git", "config", "user.signingKey", alice.email, cwd=root)
    mine = snap(root, {"a.txt": "1"}, env=alice.env)
    assert signed(root, mine, alice.env) and not signed(root, mine, mallory.env)
    shown = sh("git", "log", "--show-signature", "-1", mine, cwd=root, env=alice.env).stdout
    assert f'Good signature from "{alice.signer}"' in shown
    out = pf("verify", mine, cwd=root, env=alice.env)
    assert out.stdout.startswith(f"{mine[:12]} trusted: good signature by {alice.signer} ({fmt})")
    # a signature copied onto another tree is bad, for git and for git pf
    forged = forge(root, mine, snap(root, {"a.txt": "2"}, name="two", env=alice.env))
    assert not signed(root, forged, alice.env)
    out = pf("verify", forged, cwd=root, env=alice.env, check=False)
    assert out.returncode == 1 and out.stdout == f"{forged[:12]} untrusted: bad signature by {alice.signer}\n"
    # what was fetched: unsigned, and signed by a key alice does not have, then has but does not trust
    sh("git", "config", "pf.verify", "require", cwd=root)
    pf("fetch", "origin", cwd=root, env=alice.env)
    before = sh("git", "for-each-ref", "refs/pf", cwd=root).stdout
    for rev, status in (("remotes/origin/heads/plain", "unsigned"), ("remotes/origin/heads/main", "unknown key"),
                        ("forged", "bad signature")):
        out = pf("checkout", rev, "--into", tmp_path / "x", cwd=root, env=alice.env, check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 3 and len(lines) == 1 and f"is not trusted: {status}" in lines[0], out.stderr
    alice.import_key(mallory.export())
    out = pf("checkout", theirs, "--into", tmp_path / "x", cwd=root, env=alice.env, check=False)
    assert out.returncode == 3 and f"is not trusted: untrusted key by {mallory.signer}" in out.stderr, out.stderr
    assert not (tmp_path / "x").exists() and sh("git", "for-each-ref", "refs/pf", cwd=root).stdout == before
    pf("checkout", mine, "--into", tmp_path / "mine", cwd=root, env=alice.env)
    # alice's own key loses its trust: the verdict cached under the old trust does not outlive it
    alice.distrust()
    out = pf("checkout", mine, "--into", tmp_path / "again", cwd=root, env=alice.env, check=False)
    assert out.returncode == 3 and "is not trusted: untrusted key" in out.stderr, out.stderr


def test_an_image_signed_while_its_x509_certificate_was_valid_is_expired_after(tmp_path, gpg_homes):
    old = gpg_homes("old", "x509", valid=("2020-01-01", "2021-01-01"))
    root = user(tmp_path, "old", old.email, fmt="x509")
    then = tmp_path / "gpgsm-in-2020"  # signs as the certificate's owner did while it was valid
    then.write_text('#!/bin/sh\nexec gpgsm --faked-system-time 20200601T000000 "$@"\n')
    then.chmod(0o755)
    sh("git", "config", "gpg.x509.program", then, cwd=root)
    oid = snap(root, {"a.txt": "1"}, env=old.env)
    sh("git", "config", "--unset", "gpg.x509.program", cwd=root)
    out = pf("verify", oid, cwd=root, env=old.env, check=False)
    assert out.returncode == 1 and out.stdout == f"{oid[:12]} untrusted: expired by {old.signer}\n", out.stdout


def test_an_x509_signer_is_named_by_certificate_fingerprint_not_by_a_subject_another_can_carry(tmp_path, gpg_homes):
    alice, mallory = gpg_homes("alice", "x509"), gpg_homes("mallory", "x509", cn="alice")
    assert mallory.signer == alice.signer  # the same subject, another key
    root = user(tmp_path, "alice", alice.email, fmt="x509")
    mine = snap(root, {"a.txt": "1"}, env=alice.env)
    theirs_repo = user(tmp_path, "mallory", mallory.email, fmt="x509")
    theirs = snap(theirs_repo, {"a.txt": "evil"}, env=mallory.env)
    sh("git", "fetch", "-q", theirs_repo, f"{theirs}:refs/pf/heads/theirs", cwd=root)
    alice.import_key(mallory.export())  # alice trusts mallory's root too (a CA she trusts for other things)
    trustlist = alice.home / "trustlist.txt"
    trustlist.write_text(trustlist.read_text() + f"{mallory.fingerprint()} S\n")
    sh("gpgconf", "--reload", "gpg-agent", env=alice.env)
    sh("git", "config", "pf.verify", "require", cwd=root)
    out = pf("verify", theirs, cwd=root, env=alice.env)  # by subject, mallory passes as alice
    assert out.stdout.startswith(f"{theirs[:12]} trusted: good signature by {alice.signer} (x509)")
    sh("git", "config", "pf.x509.signer", ":".join(alice.fingerprint()[i:i + 2] for i in range(0, 40, 2)).lower(), cwd=root)
    out = pf("verify", mine, cwd=root, env=alice.env)
    assert out.stdout.startswith(f"{mine[:12]} trusted: good signature by {alice.signer} (x509)")
    out = pf("checkout", theirs, "--into", tmp_path / "x", cwd=root, env=alice.env, check=False)
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 3 and len(lines) == 1, out.stderr
    assert f"is not trusted: untrusted key by {alice.signer} (certificate {mallory.fingerprint()} is not one of " \
           "pf.x509.signer)" in lines[0] and not (tmp_path / "x").exists()
    pf("checkout", mine, "--into", tmp_path / "mine", cwd=root, env=alice.env)
    sh("git", "config", "pf.x509.signer", "alice", cwd=root)
    out = pf("verify", mine, cwd=root, env=alice.env, check=False)
    assert out.returncode == 2 and out.stderr.strip() == \
        "git pf: error: pf.x509.signer 'alice' is not a certificate fingerprint (40 hex digits)", out.stderr


def test_an_image_signed_by_a_revoked_x509_certificate_is_refused_with_one_line(tmp_path):
    for tool in ("gpgsm", "dirmngr", "openssl"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed (make sysdeps)")
    ca = CertificateAuthority(tmp_path / "ca")
    alice = ca.issue(tmp_path, "alice", 0x4321)
    try:
        ca.publish(alice)  # a CRL that lists nothing yet
        root = user(tmp_path, "alice", alice.fingerprint(), fmt="x509")
        oid = snap(root, {"a.txt": "1"}, env=alice.env)
        sh("git", "config", "pf.verify", "require", cwd=root)
        out = pf("verify", oid, cwd=root, env=alice.env)
        assert out.stdout.startswith(f"{oid[:12]} trusted: good signature by {alice.signer} (x509)")
        ca.revoke("alice")
        ca.publish(alice)  # the trusted verdict cached before does not outlive the new CRL
        out = pf("verify", oid, cwd=root, env=alice.env, check=False)
        assert out.returncode == 1 and out.stdout == f"{oid[:12]} untrusted: revoked by {alice.signer}\n", out.stdout
        out = pf("checkout", oid, "--into", tmp_path / "x", cwd=root, env=alice.env, check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 3 and len(lines) == 1 and f"is not trusted: revoked by {alice.signer}" in lines[0], \
            out.stderr
        assert not (tmp_path / "x").exists()
    finally:
        alice.close()


def test_a_step_that_cannot_be_signed_mid_run_is_lost_and_the_agent_goes_on(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    once = tmp_path / "sign-once"  # a signing program that signs step 0, then fails (an agent that lost the key)
    once.write_text(f'#!/bin/sh\nif [ -e "{tmp_path}/signed" ]; then echo "no key in the agent" >&2; exit 1; fi\n'
                    f'touch "{tmp_path}/signed"\nexec ssh-keygen "$@"\n')
    once.chmod(0o755)
    sh("git", "config", "gpg.ssh.program", once, cwd=root)
    with FakeLLM(SCRIPT) as fake:
        out = record(pf, root, fake, "openai.chat", tmp_path / "sb", check=False)
        assert len(fake.requests) == 5  # every exchange reached the agent
    assert out.returncode == 1
    warned = [line for line in out.stderr.splitlines() if "warning" in line]
    assert len(warned) == 1 and "not written" in warned[0] and "no key in the agent" in warned[0]
    assert report(out.stdout)["steps_lost"] == 6  # steps 1-5 and the end image
    sh("git", "config", "--unset", "gpg.ssh.program", cwd=root)  # git verifies with that program too
    assert signed(root, "refs/pf/heads/run") and sh("git", "rev-list", "refs/pf/heads/run", cwd=root).stdout.count("\n") == 1


def test_commit_gpgsign_signs_images_and_forks_unless_pf_sign_is_false(tmp_path, keys):
    root = user(tmp_path, "alice", keys["alice"], keys["allowed"])
    sh("git", "config", "--unset", "pf.sign", cwd=root)
    sh("git", "config", "commit.gpgSign", "true", cwd=root)
    first = snap(root, {"a.txt": "1"})
    assert signed(root, first)
    fork = pf("fork", "main", "-n", "1", "--json", cwd=root).stdout
    assert signed(root, json.loads(fork)[0]["id"])
    sh("git", "config", "pf.sign", "false", cwd=root)
    assert not signed(root, snap(root, {"a.txt": "2"}))
