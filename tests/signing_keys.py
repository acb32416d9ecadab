"""Throwaway GnuPG homes for the signing tests: one key per home, OpenPGP (``gpg``) or X.509
(``gpgsm``: a self-signed certificate, its root marked trusted in the home's trustlist.txt, CRL
checks off; or a certificate an ``openssl`` CA issued, whose CRL the home's dirmngr is given),
each home made under the test's temporary directory (never the user's ~/.gnupg)."""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from transport_helpers import sh

PROGRAMS = {"openpgp": "gpg", "x509": "gpgsm"}


@dataclass
class GpgHome:
    """One GnuPG home holding ``name``'s key in format ``fmt``; ``env`` points the programs at it."""

    home: Path
    name: str
    fmt: str
    cn: str = ""  # X.509: the certificate's common name (``name`` when empty)

    @property
    def env(self) -> dict:
        return {"GNUPGHOME": str(self.home)}

    @property
    def program(self) -> str:
        return PROGRAMS[self.fmt]

    @property
    def email(self) -> str:
        return f"{self.name}@example.org"

    @property
    def signer(self) -> str:
        """How the program names the signer in its GOODSIG line (what ``git pf verify`` prints)."""
        return f"{self.name} <{self.email}>" if self.fmt == "openpgp" else f"/CN={self.cn or self.name}/O=Example"

    def fingerprint(self) -> str:
        out = sh(self.program, "--with-colons", "--list-keys", self.email, env=self.env).stdout
        return next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))

    def export(self) -> str:
        """The public key (OpenPGP) or certificate (X.509), armored."""
        return sh(self.program, "--armor", "--export", self.email, env=self.env).stdout

    def import_key(self, armored: str) -> None:
        """Know another's key or certificate without trusting it."""
        sh(self.program, "--batch", "--import", env=self.env, input=armored)

    def distrust(self) -> None:
        """Take the trust in this home's own key away (X.509: its root leaves trustlist.txt)."""
        if self.fmt == "x509":
            (self.home / "trustlist.txt").write_text("")
            sh("gpgconf", "--reload", "gpg-agent", env=self.env)  # the agent reads trustlist.txt
        else:
            sh("gpg", "--batch", "--import-ownertrust", env=self.env, input=f"{self.fingerprint()}:3:\n")

    def close(self) -> None:
        sh("gpgconf", "--kill", "all", env=self.env, check=False)  # gpg-agent, and dirmngr where one ran


def available(fmt: str) -> bool:
    return shutil.which(PROGRAMS[fmt]) is not None


def make_home(tmp: Path, name: str, fmt: str, valid: tuple[str, str] | None = None, cn: str = "") -> GpgHome:
    """A fresh home under ``tmp`` with a new key for ``name``, no passphrase, batch mode;
    ``valid``: an X.509 certificate's first and last day (YYYY-MM-DD); ``cn``: its common name
    (another's, to pose as them)."""
    h = GpgHome(tmp / f"gnupg-{fmt}-{name}", name, fmt, cn)
    h.home.mkdir(mode=0o700)
    sh("gpgconf", "--launch", "gpg-agent", env=h.env)  # started here, not on first use by a busy machine
    if fmt == "openpgp":
        sh("gpg", "--batch", "--pinentry-mode", "loopback", "--passphrase", "", "--quick-gen-key",
           f"{name} <{h.email}>", "ed25519", "sign", "never", env=h.env)
        return h
    (h.home / "gpgsm.conf").write_text("disable-crl-checks\n")  # a self-signed root publishes no CRL
    params = h.home / "certificate.params"
    params.write_text(f"Key-Type: RSA\nKey-Length: 2048\nKey-Usage: sign, cert\nName-DN: CN={cn or name},O=Example\n"
                      f"Name-Email: {h.email}\nSerial: random\n"  # a serial: self-signed, not a request
                      + (f"Not-Before: {valid[0]}\nNot-After: {valid[1]}\n" if valid else ""))
    cert = h.home / "certificate.pem"
    sh("gpgsm", "--batch", "--pinentry-mode", "loopback", "--passphrase-fd", "0", "--armor", "--gen-key",
       "-o", cert, params, env=h.env, input="")  # an empty passphrase: the key is left unprotected
    sh("gpgsm", "--batch", "--import", cert, env=h.env)
    (h.home / "trustlist.txt").write_text(f"{h.fingerprint()} S\n")
    sh("gpgconf", "--reload", "gpg-agent", env=h.env)
    return h


class CertificateAuthority:
    """A CA made with ``openssl`` under ``dir``: it issues a certificate for a gpgsm key (from
    the key's request; the certificate names a CRL distribution point no one serves, so gpgsm
    asks dirmngr), revokes it, and publishes its CRL into a home's dirmngr (``loadcrl``)."""

    def __init__(self, dir: Path):
        self.dir = dir
        dir.mkdir()
        (dir / "index.txt").write_text("")
        (dir / "crlnumber").write_text("1000\n")
        (dir / "ca.cnf").write_text(
            "[ca]\ndefault_ca = own\n[own]\ndir = .\ndatabase = index.txt\nnew_certs_dir = .\n"
            "crlnumber = crlnumber\ndefault_md = sha256\ndefault_crl_days = 3650\npolicy = any\n"
            "[any]\ncommonName = supplied\n[root]\nbasicConstraints = critical,CA:TRUE\n"
            "keyUsage = critical,keyCertSign,cRLSign\nsubjectKeyIdentifier = hash\n"
            "[leaf]\nbasicConstraints = critical,CA:FALSE\nkeyUsage = critical,digitalSignature,nonRepudiation\n"
            "authorityKeyIdentifier = keyid\ncrlDistributionPoints = URI:http://127.0.0.1:9/ca.crl\n")
        self._openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
                      "-days", "3650", "-subj", "/CN=Example CA/O=Example", "-config", "ca.cnf", "-extensions", "root")

    def _openssl(self, *args) -> None:
        sh("openssl", *args, cwd=self.dir)

    def trust_in(self, h: GpgHome) -> None:
        """``h`` knows the CA's certificate and trusts it as a root."""
        sh("gpgsm", "--batch", "--import", self.dir / "ca.pem", env=h.env)
        out = sh("gpgsm", "--with-colons", "--list-keys", "Example CA", env=h.env).stdout
        fpr = next(line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:"))
        (h.home / "trustlist.txt").write_text(f"{fpr} S\n")
        sh("gpgconf", "--reload", "gpg-agent", env=h.env)

    def issue(self, tmp: Path, name: str, serial: int) -> GpgHome:
        """A home whose key for ``name`` has a certificate this CA issued (and trusts the CA)."""
        h = GpgHome(tmp / f"gnupg-x509-{name}", name, "x509")
        h.home.mkdir(mode=0o700)
        sh("gpgconf", "--launch", "gpg-agent", env=h.env)
        params, request = h.home / "request.params", self.dir / f"{name}.req"
        params.write_text(f"Key-Type: RSA\nKey-Length: 2048\nKey-Usage: sign\nName-DN: CN={name},O=Example\n"
                          f"Name-Email: {h.email}\n")
        sh("gpgsm", "--batch", "--pinentry-mode", "loopback", "--passphrase-fd", "0", "--armor", "--gen-key",
           "-o", request, params, env=h.env, input="")
        self._openssl("x509", "-req", "-in", request, "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial",
                      str(serial), "-days", "3650", "-out", f"{name}.pem", "-extfile", "ca.cnf", "-extensions", "leaf",
                      "-copy_extensions", "copy")  # the request's e-mail address (subjectAltName)
        self.trust_in(h)
        sh("gpgsm", "--batch", "--import", self.dir / f"{name}.pem", env=h.env)
        return h

    def revoke(self, name: str) -> None:
        self._openssl("ca", "-config", "ca.cnf", "-keyfile", "ca.key", "-cert", "ca.pem", "-revoke", f"{name}.pem")

    def publish(self, h: GpgHome) -> None:
        """A fresh CRL, loaded into ``h``'s dirmngr (as if fetched from the distribution point)."""
        self._openssl("ca", "-config", "ca.cnf", "-keyfile", "ca.key", "-cert", "ca.pem", "-gencrl", "-out", "crl.pem")
        self._openssl("crl", "-in", "crl.pem", "-outform", "DER", "-out", "ca.crl")
        sh("gpgsm", "--call-dirmngr", "loadcrl", self.dir / "ca.crl", env=h.env)
