"""Signing image commits the way ``git commit -S`` does (docs/security.md, "Signed images").

The one seam every image commit goes through: ``write_commit`` builds the raw
commit (``packfile.commit_bytes``), signs it when signing is on, and stores
it (into the current pack, or as a loose object where the caller wrote loose
objects before). The signature sits in the ``gpgsig`` header git writes, made
by git's configured program: ``gpg.format`` openpgp (``gpg --status-fd=2
-bsau KEY``), x509 (``gpgsm``, the same flags) or ssh (``ssh-keygen -Y sign -n
git -f KEY``), with ``user.signingKey`` and ``gpg.program`` /
``gpg.<format>.program``; so ``git verify-commit`` and ``git log
--show-signature`` read it. Signing is on with ``commit.gpgSign``,
``pf.sign`` or ``signed(key)`` around a write (``git pf snapshot -S``); a
failure is one ``UsageError`` line and nothing is written. Off, the cost is
one config read per commit.
"""
from __future__ import annotations

import contextvars
import os
import subprocess
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass

import pygit2

from ..core.errors import UsageError
from ..store.packfile import COMMIT, commit_bytes, current

FORMATS = ("openpgp", "ssh", "x509")
_PROGRAMS = {"openpgp": "gpg", "ssh": "ssh-keygen", "x509": "gpgsm"}
_forced: contextvars.ContextVar = contextvars.ContextVar("git_pf_sign", default=None)
_TIMEOUT_S = 60  # a signing program waiting on a passphrase prompt no one answers


class SigningFailed(UsageError):
    """The signing program did not sign (a missing key, a program that fails or is absent): one line, no image."""


@dataclass(frozen=True)
class Signer:
    """How to sign: git's format, the key (None: the committer's identity, for openpgp/x509) and the program."""

    format: str
    key: str | None
    program: str


@contextmanager
def signed(key: str | bool = True):
    """Within, every image commit of this thread (and its context) is signed: ``True`` with
    ``user.signingKey``, a string with that key (``-S``/``--gpg-sign=KEYID``)."""
    token = _forced.set(key)
    try:
        yield
    finally:
        _forced.reset(token)


def sign_from_now(key: str | bool = True) -> None:
    """Sign every image commit written from now on in this context (a command's process: ``-S``)."""
    _forced.set(key)


def _bool(cfg: pygit2.Config, key: str) -> bool | None:
    try:
        return cfg.get_bool(key)
    except KeyError:
        return None
    except (ValueError, pygit2.GitError):
        raise UsageError(f"{key} must be a boolean (true/false)") from None


def _str(cfg: pygit2.Config, key: str) -> str | None:
    try:
        return cfg[key]
    except KeyError:
        return None


def signer(git: pygit2.Repository) -> Signer | None:
    """The signer the configuration asks for, or None when image commits are not signed."""
    forced = _forced.get()
    cfg = git.config
    if not forced:
        on = _bool(cfg, "pf.sign")
        if on is None:
            on = _bool(cfg, "commit.gpgSign")
        if not on:
            return None
    fmt = (_str(cfg, "gpg.format") or "openpgp").lower()
    if fmt not in FORMATS:
        raise UsageError(f"gpg.format '{fmt}' is not one of {', '.join(FORMATS)}")
    key = forced if isinstance(forced, str) and forced else _str(cfg, "user.signingKey")
    program = _str(cfg, f"gpg.{fmt}.program") or (_str(cfg, "gpg.program") if fmt == "openpgp" else None)
    if fmt == "ssh" and not key:
        raise UsageError("signing with gpg.format=ssh needs user.signingKey (a key file or 'key::<public key>')")
    return Signer(fmt, key, program or _PROGRAMS[fmt])


def _ident(sig: pygit2.Signature) -> str:
    return f"{sig.name} <{sig.email}>"


def sign(s: Signer, payload: bytes, committer: pygit2.Signature) -> str:
    """The armored signature of ``payload`` made as git makes it; UsageError (one line) on failure."""
    if s.format == "ssh":
        return _sign_ssh(s, payload)
    key = s.key or _ident(committer)
    out = _run([s.program, "--status-fd=2", "-bsau", key], payload, s)
    if b"\n[GNUPG:] SIG_CREATED " not in b"\n" + out.stderr:
        raise SigningFailed(f"{s.program} did not sign with key '{key}': {_line(out.stderr)}")
    return out.stdout.decode("ascii", "replace")


def _sign_ssh(s: Signer, payload: bytes) -> str:
    literal = s.key.startswith("key::") or s.key.startswith("ssh-")
    if literal:  # a public key whose private half is in ssh-agent, as git takes it
        with tempfile.NamedTemporaryFile("w", prefix=".git_signing_key_tmp", delete=False) as f:
            f.write(s.key[5:] if s.key.startswith("key::") else s.key)
        path, extra = f.name, ["-U"]
    else:
        path, extra = os.path.expanduser(s.key), []
        if not os.path.exists(path):
            raise SigningFailed(f"user.signingKey '{s.key}' does not exist")
    try:
        out = _run([s.program, "-Y", "sign", "-n", "git", "-f", path, *extra], payload, s)
    finally:
        if literal:
            os.unlink(path)
    if b"-----BEGIN SSH SIGNATURE-----" not in out.stdout:
        raise SigningFailed(f"{s.program} did not sign with key '{s.key}': {_line(out.stderr)}")
    return out.stdout.decode("ascii", "replace")


def run_program(argv: list[str], payload: bytes, role: str, program: str, error: type[Exception], hint: str = ""
                ) -> subprocess.CompletedProcess:
    """``argv`` fed ``payload``, within the time limit; a program that is missing, hangs or cannot
    start is one ``error`` line naming its ``role`` ("signing", "verification")."""
    try:
        return subprocess.run(argv, input=payload, capture_output=True, timeout=_TIMEOUT_S)
    except FileNotFoundError:
        raise error(f"{role} program '{program}' not found{hint}") from None
    except subprocess.TimeoutExpired:
        raise error(f"{role} program '{program}' did not finish in {_TIMEOUT_S} s") from None
    except OSError as e:
        raise error(f"{role} program '{program}' cannot run: {e.strerror}") from None


def _run(argv: list[str], payload: bytes, s: Signer) -> subprocess.CompletedProcess:
    out = run_program(argv, payload, "signing", s.program, SigningFailed, f" (gpg.format={s.format})")
    if out.returncode != 0:
        # gpgsm finds a certificate by e-mail or fingerprint, seldom by the committer's "name <email>"
        hint = "; set user.signingKey to the certificate's e-mail or fingerprint" if s.format == "x509" and not s.key \
            else ""
        raise SigningFailed(f"signing with {s.format} key '{s.key or 'of the committer'}' failed: "
                            f"{_line(out.stderr)}{hint}")
    return out


def _line(err: bytes) -> str:
    """The last meaningful line a signing program wrote (not gpg's status lines)."""
    lines = [x for x in err.decode("utf-8", "replace").splitlines() if x.strip() and not x.startswith("[GNUPG:]")]
    return " ".join(lines[-1].split())[:200] if lines else "no message"


def with_signature(raw: bytes, signature: str) -> bytes:
    """``raw`` with the ``gpgsig`` header git adds after the other headers (continuation lines start with a space)."""
    head, _, body = raw.partition(b"\n\n")
    lines = signature.rstrip("\n").split("\n")
    return head + b"\ngpgsig " + "\n ".join(lines).encode("ascii") + b"\n\n" + body


def write_commit(git: pygit2.Repository, author: pygit2.Signature, committer: pygit2.Signature, message: str,
                 tree, parents: list, pack=None) -> str:
    """Write an image commit, signed when signing is on; its id. Into ``pack`` when given (the
    caller flushes it before a ref moves), else into the writer ``packfile.packing`` set for
    ``git`` in this thread, else as a loose object (as ``create_commit`` does)."""
    raw = commit_bytes(author, committer, message, str(tree), [str(p) for p in parents])
    s = signer(git)
    if s is not None:
        raw = with_signature(raw, sign(s, raw, committer))
    pack = pack if pack is not None else current(git)
    if pack is not None:
        return pack.add(COMMIT, raw).hex()
    return str(git.odb.write(pygit2.enums.ObjectType.COMMIT, raw))
