"""Verifying image signatures and the trust policy (docs/security.md, "Signed images").

``pf.verify`` (``off``, the default | ``warn`` | ``require``), and per remote
``pf.remote.<r>.verify`` for images its refs reach, decide what a command
does with an image it is about to use: ``check_use`` is the one call the
commands make where they resolve a revision to an image, and answers at once
when every policy is off. Under ``require`` an image is trusted when its own
commit carries a good signature by a trusted key (SSH: a key of
``gpg.ssh.allowedSignersFile``, checked with ``ssh-keygen -Y verify``;
OpenPGP / X.509: ``gpg`` / ``gpgsm --verify`` at ``gpg.minTrustLevel``,
default marginal; X.509, where ``pf.x509.signer`` names certificates by
fingerprint, only one of those: a subject is a name any certificate can
carry), or, when it is unsigned or signed by a key not trusted,
when a descendant on the same first-parent line is (a commit id covers its
ancestors). A bad signature is never covered. Trusted commit ids are cached
in ``$GIT_DIR/pf/verified/`` under a key of the trust settings (the allowed
signers file's bytes, the keyrings' and gpgsm's trustlist.txt's times), so
changing them re-checks.
"""
from __future__ import annotations

import base64
import hashlib
import os
import shlex
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pygit2

from . import refs
from ..core.errors import DataError, UsageError
from .signing import run_program

POLICIES = ("off", "warn", "require")
GOOD, UNSIGNED, BAD, UNKNOWN, EXPIRED, UNTRUSTED, REVOKED = (
    "good", "unsigned", "bad signature", "unknown key", "expired", "untrusted key", "revoked")
_TRUST = ("undefined", "never", "marginal", "fully", "ultimate")
_PROGRAMS = {"openpgp": "gpg", "ssh": "ssh-keygen", "x509": "gpgsm"}
_CERT_REVOKED = "94"  # libgpg-error's GPG_ERR_CERT_REVOKED, as gpgsm's TRUST_NEVER line gives it


class Untrusted(DataError):
    """An image the policy refuses to use (exit 3)."""


@dataclass(frozen=True)
class Verdict:
    """One image's signature: its own ``status``, who signed (``signer``), and whether the
    policy trusts it (``via``: the signed descendant that vouches for it, when not itself)."""

    id: str
    status: str
    signer: str | None = None
    format: str | None = None
    trusted: bool = False
    via: str | None = None
    detail: str | None = None

    def describe(self) -> str:
        who = f" by {self.signer}" if self.signer else ""
        text = f"good signature{who} ({self.format})" if self.status == GOOD else f"{self.status}{who}"
        if self.detail:
            text += f" ({self.detail})"
        if self.via:
            text += f"; trusted through {self.via[:12]}, a signed descendant"
        return text

    def to_json(self) -> dict:
        return {"status": self.status, "signer": self.signer, "format": self.format, "trusted": self.trusted,
                "via": self.via, "detail": self.detail}


def x509_signers(cfg: pygit2.Config) -> frozenset[str]:
    """The certificate fingerprints ``pf.x509.signer`` names (SHA-1, 40 hex digits, colons and
    spaces allowed, as gpgsm prints them); UsageError for a value that is none."""
    try:
        values = list(cfg.get_multivar("pf.x509.signer"))
    except (KeyError, pygit2.GitError):
        values = []
    out = set()
    for value in values:
        fpr = value.replace(":", "").replace(" ", "").upper()
        if len(fpr) != 40 or any(c not in "0123456789ABCDEF" for c in fpr):
            raise UsageError(f"pf.x509.signer '{value}' is not a certificate fingerprint (40 hex digits)")
        out.add(fpr)
    return frozenset(out)


# -- the policy ---------------------------------------------------------------------
def _policy_value(cfg: pygit2.Config, key: str) -> str | None:
    try:
        value = cfg[key]
    except KeyError:
        return None
    if value.lower() not in POLICIES:
        raise UsageError(f"{key} must be one of {', '.join(POLICIES)}, not '{value}'")
    return value.lower()


def policies(git: pygit2.Repository) -> tuple[str, dict[str, str]]:
    """(``pf.verify``, {remote: ``pf.remote.<r>.verify``} for the remotes that set one)."""
    cfg = git.config
    base = _policy_value(cfg, "pf.verify") or "off"
    per = {}
    for name in git.remotes.names():
        value = _policy_value(cfg, f"pf.remote.{name}.verify")
        if value is not None:
            per[name] = value
    return base, per


def policy(git: pygit2.Repository, oid: str) -> str:
    """The policy for image ``oid``: ``pf.verify``, or a stricter ``pf.remote.<r>.verify`` of a remote whose refs reach it."""
    base, per = policies(git)
    best = base
    for remote, value in per.items():
        if POLICIES.index(value) <= POLICIES.index(best):
            continue
        for tip in refs.list_refs(git, f"{refs.ROOT}remotes/{remote}/").values():
            if tip == oid or _descends(git, tip, oid):
                best = value
                break
    return best


def _descends(git, tip: str, oid: str) -> bool:
    try:
        return git.descendant_of(tip, oid)
    except (pygit2.GitError, ValueError, KeyError):
        return False


def check_use(git: pygit2.Repository, oid: str, rev: str | None = None) -> None:
    """Refuse (``Untrusted``, exit 3) to use image ``oid`` when the policy requires a trusted
    signature it lacks; one warning line under ``warn``; nothing at all when the policy is off."""
    base, per = policies(git)
    if base == "off" and not per:
        return
    pol = policy(git, oid) if per else base
    if pol == "off":
        return
    verdict = Verifier(git).trust(oid)
    if verdict.trusted:
        return
    named = f" ({rev})" if rev and not oid.startswith(rev) else ""
    line = f"image {oid[:12]}{named} is not trusted: {verdict.describe()} (pf.verify={pol})"
    if pol == "require":
        raise Untrusted(line)
    sys.stderr.write(f"git pf: warning: {line}\n")


# -- signatures ---------------------------------------------------------------------
def _armor_format(sig: bytes) -> str:
    if sig.startswith(b"-----BEGIN SSH SIGNATURE-----"):
        return "ssh"
    if sig.startswith(b"-----BEGIN SIGNED MESSAGE-----"):
        return "x509"
    return "openpgp"


def _str_cfg(cfg, key: str) -> str | None:
    try:
        return cfg[key]
    except KeyError:
        return None


class AllowedSigners:
    """``gpg.ssh.allowedSignersFile``: principals by public key blob (``cert-authority`` lines kept aside)."""

    def __init__(self, path: Path):
        self.path = path
        self.by_key: dict[bytes, list[str]] = {}
        self.has_ca = False
        try:
            text = path.read_text("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise UsageError(f"gpg.ssh.allowedSignersFile '{path}' cannot be read: "
                             f"{getattr(e, 'strerror', None) or e}") from None
        self.digest = hashlib.sha256(text.encode()).hexdigest()
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            try:
                fields = shlex.split(line, comments=False)
            except ValueError:
                fields = []
            blob = self._parse(fields)
            if blob is None:
                raise UsageError(f"gpg.ssh.allowedSignersFile '{path}' line {n} does not parse "
                                 "(want: PRINCIPALS [OPTIONS] KEYTYPE BASE64-KEY)")
            if blob == b"":
                continue  # a key for other namespaces, or a certificate authority
            for who in fields[0].split(","):
                self.by_key.setdefault(blob, []).append(who)

    def _parse(self, fields: list[str]) -> bytes | None:
        """The key blob of one line, b"" when it is not for git's namespace or is a CA, None when malformed."""
        if len(fields) < 3 or _is_keytype(fields[0]):
            return None
        at = 1 if _is_keytype(fields[1]) else 2
        if at >= len(fields) - 1 or not _is_keytype(fields[at]):
            return None
        try:
            blob = base64.b64decode(fields[at + 1], validate=True)
        except ValueError:
            return None
        if _ssh_string(blob, 0)[0] != fields[at].encode():
            return None
        options = {o.split("=", 1)[0].lower(): o.split("=", 1)[-1] for o in fields[1].split(",")} if at == 2 else {}
        if "cert-authority" in options:
            self.has_ca = True
            return b""
        if "namespaces" in options and "git" not in options["namespaces"].split(","):
            return b""
        return blob


def _is_keytype(word: str) -> bool:
    return word.startswith(("ssh-", "ecdsa-", "sk-ssh-", "sk-ecdsa-"))


def _ssh_string(data: bytes, at: int) -> tuple[bytes, int]:
    if at + 4 > len(data):
        return b"", len(data)
    (n,) = struct.unpack(">I", data[at:at + 4])
    return data[at + 4:at + 4 + n], at + 4 + n


def _sshsig_key(sig: bytes) -> bytes | None:
    """The public key blob of an armored SSHSIG, None when it is not one."""
    body = b"".join(line.strip() for line in sig.splitlines()[1:-1] if not line.startswith(b"-----"))
    try:
        raw = base64.b64decode(body)
    except ValueError:
        return None
    if not raw.startswith(b"SSHSIG"):
        return None
    key, _ = _ssh_string(raw, 10)
    return key or None


class Verifier:
    """Checks commits' signatures against the trust settings of one repository, with the cache."""

    def __init__(self, git: pygit2.Repository):
        self.git = git
        cfg = git.config
        self.cfg = cfg
        allowed = _str_cfg(cfg, "gpg.ssh.allowedSignersFile")
        self.allowed_path = Path(os.path.expanduser(allowed)) if allowed else None
        self._allowed: AllowedSigners | None = None
        level = (_str_cfg(cfg, "gpg.minTrustLevel") or "marginal").lower()
        if level not in _TRUST:
            raise UsageError(f"gpg.minTrustLevel must be one of {', '.join(_TRUST)}, not '{level}'")
        self.min_trust = _TRUST.index(level)
        self.x509_signers = x509_signers(cfg)
        self.cache_file = Path(git.path) / "pf" / "verified" / self._settings_key()
        self._cached: dict[str, Verdict] | None = None
        self._own: dict[str, Verdict] = {}
        self._pending: list[str] = []  # cache lines not written yet (``_flush``)

    # -- the cache -----------------------------------------------------------
    def _settings_key(self) -> str:
        h = hashlib.sha256()
        if self.allowed_path is not None:
            try:
                h.update(self.allowed_path.read_bytes())
            except OSError:
                h.update(b"-")
        home = Path(os.environ.get("GNUPGHOME") or os.path.expanduser("~/.gnupg"))
        # the keyrings, gpg's trust database, gpgsm's trusted roots and dirmngr's CRLs
        for name in ("pubring.kbx", "pubring.gpg", "trustdb.gpg", "trustlist.txt", "crls.d/DIR.txt"):
            try:
                h.update(b"%s %d" % (name.encode(), (home / name).stat().st_mtime_ns))
            except OSError:
                pass
        h.update(str(self.min_trust).encode())
        h.update(" ".join(sorted(self.x509_signers)).encode())
        return h.hexdigest()[:24]

    def cached(self, oid: str) -> Verdict | None:
        """The trusted verdict on ``oid`` found before under the same trust settings, or None
        (one read of the cache file, then a search of its text: no parse of every line)."""
        if self._cached is None:
            self._cached = {}
            try:
                self._text = "\n" + self.cache_file.read_text("utf-8")
            except (OSError, UnicodeDecodeError):
                self._text = "\n"
        found = self._cached.get(oid)
        if found is None:
            at = self._text.find("\n" + oid + "\t") if len(oid) == 40 else -1
            if at >= 0:
                end = self._text.find("\n", at + 1)
                f = self._text[at + 1:end if end >= 0 else None].split("\t")
                if len(f) == 5:
                    found = self._cached[oid] = Verdict(oid, f[1], f[2] or None, f[3] or None, True, f[4] or None)
        return found

    def _remember(self, v: Verdict) -> None:
        if self.cached(v.id) is None:
            self._cached[v.id] = v
            self._pending.append("\t".join([v.id, v.status, (v.signer or "").replace("\t", " ").replace("\n", " "),
                                            v.format or "", v.via or ""]))

    def _flush(self) -> None:
        """Append the verdicts found since the last flush to the cache file, in one write (lines
        of whole verdicts: a reader skips a line it does not understand)."""
        if not self._pending:
            return
        data, self._pending = ("\n".join(self._pending) + "\n").encode(), []
        try:
            self.cache_file.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.cache_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError:
            pass  # only the next check's speed depends on it

    # -- one commit's own signature -------------------------------------------
    def own(self, oid: str) -> Verdict:
        """The status of ``oid``'s own signature (not its descendants')."""
        if oid in self._own:
            return self._own[oid]
        commit = self.git.get(oid)
        if not isinstance(commit, pygit2.Commit):
            raise UsageError(f"{oid[:12]} is not a commit")
        sig, payload = commit.gpg_signature
        if not sig:
            verdict = Verdict(oid, UNSIGNED)
        else:
            fmt = _armor_format(sig)
            verdict = (self._ssh(oid, sig, payload, commit.committer.time) if fmt == "ssh"
                       else self._gpg(oid, fmt, sig, payload))
        self._own[oid] = verdict
        return verdict

    def _ssh(self, oid: str, sig: bytes, payload: bytes, when: int) -> Verdict:
        if self.allowed_path is None:
            return Verdict(oid, UNKNOWN, format="ssh", detail="gpg.ssh.allowedSignersFile is not set")
        if self._allowed is None:
            self._allowed = AllowedSigners(self.allowed_path)
        key = _sshsig_key(sig)
        if key is None:
            return Verdict(oid, BAD, format="ssh", detail="not an SSH signature")
        principals = list(self._allowed.by_key.get(key, []))
        program = _str_cfg(self.cfg, "gpg.ssh.program") or "ssh-keygen"
        with tempfile.NamedTemporaryFile(prefix="git-pf-sig-", suffix=".sig") as f:
            f.write(sig)
            f.flush()
            if not principals and self._allowed.has_ca:  # a certificate: ssh-keygen knows its principals
                out = _run([program, "-Y", "find-principals", "-f", str(self.allowed_path), "-s", f.name], b"", program)
                principals = out.stdout.decode("utf-8", "replace").split() if out.returncode == 0 else []
            if not principals:
                return Verdict(oid, UNKNOWN, format="ssh")
            stamp = time.strftime("%Y%m%d%H%M%S", time.localtime(when))
            status, detail = BAD, None
            for who in principals:
                out = _run([program, "-Y", "verify", "-f", str(self.allowed_path), "-I", who, "-n", "git", "-s", f.name,
                            f"-Overify-time={stamp}"], payload, program)
                said = (out.stdout + out.stderr).decode("utf-8", "replace")
                if out.returncode == 0 and "Good " in said:
                    return Verdict(oid, GOOD, who, "ssh", True)
                if "expired" in said or "not yet valid" in said:
                    status, detail = EXPIRED, None
                elif status != EXPIRED:
                    detail = _last_line(said)
            return Verdict(oid, status, principals[0], "ssh", detail=detail if status == BAD else None)

    def _gpg(self, oid: str, fmt: str, sig: bytes, payload: bytes) -> Verdict:
        program = _str_cfg(self.cfg, f"gpg.{fmt}.program") or (_str_cfg(self.cfg, "gpg.program") if fmt == "openpgp"
                                                              else None) or _PROGRAMS[fmt]
        with tempfile.NamedTemporaryFile(prefix="git-pf-sig-", suffix=".sig") as f:
            f.write(sig)
            f.flush()
            out = _run([program, "--status-fd=1", "--verify", f.name, "-"], payload, program)
        status, signer, trust, fingerprint, revoked = BAD, None, 0, None, False
        for line in out.stdout.decode("utf-8", "replace").splitlines():
            words = line.split()
            if len(words) < 2 or words[0] != "[GNUPG:]":
                continue
            tag = words[1]
            if tag in ("GOODSIG", "BADSIG", "EXPSIG", "EXPKEYSIG", "REVKEYSIG") and len(words) > 2:
                signer = " ".join(words[3:]) or words[2]
                status = {"GOODSIG": GOOD, "BADSIG": BAD, "REVKEYSIG": REVOKED}.get(tag, EXPIRED)
            elif tag == "ERRSIG" or tag == "NO_PUBKEY":
                status, signer = UNKNOWN, signer or (words[2] if len(words) > 2 else None)
            elif tag == "ERROR" and words[2:3] == ["verify.findkey"]:  # gpgsm: the signer's certificate is not known
                status = UNKNOWN
            elif tag == "VALIDSIG" and len(words) > 2:  # the signing key's (X.509: certificate's) fingerprint
                fingerprint = words[2].upper()
            elif tag.startswith("TRUST_") and tag[6:].lower() in _TRUST:
                trust = _TRUST.index(tag[6:].lower())
                revoked = tag == "TRUST_NEVER" and words[2:3] == [_CERT_REVOKED]  # gpgsm: a CRL lists it
        if status == GOOD and revoked:
            return Verdict(oid, REVOKED, signer, fmt)
        if status == GOOD and (out.returncode != 0 or trust < self.min_trust):
            return Verdict(oid, UNTRUSTED, signer, fmt, detail=f"trust {_TRUST[trust]}")
        if status == GOOD and fmt == "x509" and self.x509_signers and fingerprint not in self.x509_signers:
            return Verdict(oid, UNTRUSTED, signer, fmt,
                           detail=f"certificate {fingerprint or 'unknown'} is not one of pf.x509.signer")
        return Verdict(oid, status, signer, fmt, status == GOOD)

    # -- trust: own signature, else a signed descendant on the same line -------------
    def trust(self, oid: str) -> Verdict:
        """Whether the policy trusts ``oid``: its own good signature, else the nearest signed
        descendant on a first-parent line from an image ref down to it. Cached when trusted."""
        try:
            return self._trust(oid)
        finally:
            self._flush()

    def _trust(self, oid: str) -> Verdict:
        known = self.cached(oid)
        if known is not None:
            return known
        own = self.own(oid)
        if own.trusted or own.status == BAD:
            if own.trusted:
                self._remember(own)
            return own
        for line in self._lines_down_to(oid):
            for c in reversed(line):  # nearest to oid first
                if self.cached(c) is not None or self.own(c).trusted:
                    self._remember(self.cached(c) or self.own(c))
                    verdict = Verdict(oid, own.status, own.signer, own.format, True, via=c, detail=own.detail)
                    self._remember(verdict)
                    return verdict
        return own

    def _lines_down_to(self, oid: str):
        """For each image ref whose first-parent line passes ``oid``: the commits above it, tip first."""
        seen = set()
        for name, tip in refs.list_refs(self.git, refs.ROOT).items():
            if tip in seen or tip == oid or not refs.is_image_ref(name) or not _descends(self.git, tip, oid):
                continue
            seen.add(tip)
            line, c = [], self.git.get(tip)
            while isinstance(c, pygit2.Commit) and str(c.id) != oid:
                line.append(str(c.id))
                c = self.git.get(c.parent_ids[0]) if c.parent_ids else None
            if c is not None:
                yield line

    def all_lines(self, tips: list[str]) -> dict[str, Verdict]:
        """Every image on the first-parent lines of ``tips``, each walked once from its tip down
        (``git pf verify --all``): a trusted signed commit covers those below it."""
        try:
            return self._all_lines(tips)
        finally:
            self._flush()

    def _all_lines(self, tips: list[str]) -> dict[str, Verdict]:
        out: dict[str, Verdict] = {}
        for tip in tips:
            cover, c = None, self.git.get(tip)
            while isinstance(c, pygit2.Commit):
                oid = str(c.id)
                known = out.get(oid)
                if known is not None and known.trusted and cover is None:
                    cover = known.via or oid
                verdict = self.cached(oid)
                if verdict is None:
                    own = self.own(oid)
                    verdict = own if own.trusted or own.status == BAD or cover is None else \
                        Verdict(oid, own.status, own.signer, own.format, True, via=cover, detail=own.detail)
                if verdict.trusted:
                    self._remember(verdict)
                    cover = cover if verdict.via else oid
                if known is None or (verdict.trusted and not known.trusted):
                    out[oid] = verdict
                c = self.git.get(c.parent_ids[0]) if c.parent_ids else None
        return out


def _run(argv: list[str], payload: bytes, program: str) -> subprocess.CompletedProcess:
    return run_program(argv, payload, "verification", program, UsageError)


def _last_line(text: str) -> str | None:
    lines = [x for x in text.splitlines() if x.strip()]
    return " ".join(lines[-1].split())[:200] if lines else None


def image_tips(git: pygit2.Repository) -> list[str]:
    """The tips of every image ref under ``refs/pf/`` (branches, tags, remotes' refs, runs' refs)."""
    return sorted({tip for name, tip in refs.list_refs(git, refs.ROOT).items() if refs.is_image_ref(name)})


def untrusted_lines(git: pygit2.Repository) -> tuple[str, list[str]]:
    """(``pf.verify``, one line per image on an image ref's line that is not trusted) for
    ``git pf fsck``; no line, and no signature checked, when every policy is off."""
    base, per = policies(git)
    if base == "off" and not per:
        return base, []
    verdicts = Verifier(git).all_lines(image_tips(git))
    return base, [f"image {v.id[:12]} is not trusted: {v.describe()} (pf.verify={policy(git, v.id)})"
                  for v in verdicts.values() if not v.trusted and policy(git, v.id) != "off"]
