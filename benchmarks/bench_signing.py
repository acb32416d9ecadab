"""Signed images: what signing adds per image, and what pf.verify=require costs on a long history.

    python -m benchmarks.bench_signing [--snapshots 30] [--images 1000]

Keys are made with ssh-keygen (ed25519, gpg.format=ssh). Signing: ``--snapshots`` snapshots of a
small sandbox with ``--allow-empty``, unsigned then signed, in one process; the difference per
image is what signing adds (one ``ssh-keygen -Y sign``). Goal: <= 15 ms. Verifying: a line of
``--images`` images, every one signed, checked cold (``git pf verify --all``'s walk, one
``ssh-keygen -Y verify`` per signed image), then the same line with only its tip signed (a
recorded run written before signing was on, covered by one signed descendant), then the cached
re-check a second checkout pays (``check_use`` on an image verified before). Goal: <= 1 ms.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import time

from git_pf import Repo
from git_pf.core import config
from git_pf.image import signing, verify

from .common import report, sh, verdict, workdir


def setup(base):
    key = base / "key"
    sh("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", key)
    kind, blob = (base / "key.pub").read_text().split()[:2]
    (base / "allowed").write_text(f"bench@example.org {kind} {blob}\n")
    repo, _ = Repo.init(base / "repo")
    for k, v in (("user.name", "bench"), ("user.email", "bench@example.org"), ("gpg.format", "ssh"),
                 ("user.signingKey", str(key)), ("gpg.ssh.allowedSignersFile", str(base / "allowed"))):
        sh("git", "config", k, v, cwd=base / "repo")
    sb = base / "sb"
    sb.mkdir()
    for i in range(20):
        (sb / f"f{i}.txt").write_text(f"file {i}\n" * 20)
    return Repo.open(base / "repo"), sb


def per_snapshot(repo, sb, n: int) -> float:
    repo.snapshot(sb, name="warm", allow_empty=True)
    t0 = time.perf_counter()
    for _ in range(n):
        repo.snapshot(sb, name="s", allow_empty=True)
    return (time.perf_counter() - t0) / n


def line(repo, tip_image, n: int, sign_every: bool) -> str:
    """A first-parent line of ``n`` images on branch ``line-*`` (commits of one image tree)."""
    git, sig = repo.git, config.signature(repo.git)
    parent = tip_image.id
    for i in range(n):
        with signing.signed() if sign_every or i == n - 1 else _nothing():
            parent = signing.write_commit(git, sig, sig, f"image {i}\n", tip_image.tree, [parent])
    name = f"line-{'all' if sign_every else 'tip'}"
    git.references.create(f"refs/pf/heads/{name}", parent, force=True)
    return parent


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def cold_verify(repo, tip: str) -> tuple[float, int]:
    shutil.rmtree(repo.git_dir / "pf" / "verified", ignore_errors=True)
    t0 = time.perf_counter()
    verdicts = verify.Verifier(repo.git).all_lines([tip])
    return time.perf_counter() - t0, sum(v.trusted for v in verdicts.values())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--snapshots", type=int, default=30)
    ap.add_argument("--images", type=int, default=1000)
    args = ap.parse_args()
    with workdir("signing") as base:
        repo, sb = setup(base)
        plain = per_snapshot(repo, sb, args.snapshots)
        sh("git", "config", "pf.sign", "true", cwd=base / "repo")
        signed = per_snapshot(repo, sb, args.snapshots)
        sh("git", "config", "pf.sign", "false", cwd=base / "repo")
        added = (signed - plain) * 1000
        head = repo.resolve("s")
        t_build = time.perf_counter()
        tip_all = line(repo, head, args.images, sign_every=True)
        t_build = time.perf_counter() - t_build
        tip_one = line(repo, head, args.images, sign_every=False)
        sh("git", "config", "pf.verify", "require", cwd=base / "repo")
        t_all, n_all = cold_verify(repo, tip_all)
        t_one, n_one = cold_verify(repo, tip_one)
        verify.check_use(repo.git, tip_all)  # cached from here on
        bottom = str(repo.git[tip_all].parent_ids[0])
        verify.check_use(repo.git, bottom)
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            verify.check_use(repo.git, bottom)
            times.append(time.perf_counter() - t0)
        cached = statistics.median(times) * 1000
        sh("git", "config", "pf.verify", "off", cwd=base / "repo")
        off = []
        for _ in range(50):
            t0 = time.perf_counter()
            verify.check_use(repo.git, bottom)
            off.append(time.perf_counter() - t0)
        os.environ.pop("GIT_PF_REPO", None)
    report("signed images (ssh, ed25519)", [
        ("snapshot, unsigned (small sandbox)", f"{plain * 1000:.1f} ms", ""),
        ("snapshot, signed", f"{signed * 1000:.1f} ms", ""),
        ("signing adds per image", f"{added:.1f} ms", f"goal <= 15 ms  {verdict(added <= 15)}"),
        (f"{args.images} signed commits written", f"{t_build:.1f} s", f"{t_build / args.images * 1000:.1f} ms each"),
        (f"verify {args.images} images, every one signed, cold", f"{t_all:.2f} s",
         f"{t_all / args.images * 1000:.1f} ms each; {n_all} trusted"),
        (f"verify {args.images} images, tip signed, cold", f"{t_one * 1000:.0f} ms", f"{n_one} trusted"),
        ("re-check of a verified image (cached)", f"{cached:.3f} ms", f"goal <= 1 ms  {verdict(cached <= 1)}"),
        ("check with pf.verify=off", f"{statistics.median(off) * 1000:.3f} ms", ""),
    ])


if __name__ == "__main__":
    main()
