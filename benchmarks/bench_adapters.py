"""Object adapters side by side: push + clone + checkout of one large file through git (the
default adapter), lfs (a giftless server on 127.0.0.1), s3 (moto's server, when the s3 adapter
and moto are installed), against git-lfs's own client pushing the same file to the same
giftless server. Also the local disk the pushing repository uses after the push, against
the object's size (goal: at most 1.1x), and each adapter's end-to-end time against git-lfs's
(goal: not slower).

Every timed push starts after ``sync``, so the writeback of what the step before wrote does
not land on it. ``--push-rounds N`` also times N more pushes of git-pf's lfs adapter and of
git-lfs, interleaved, each to a new repository of the same server (all of it uploaded
again), and reports their medians and the ratio. ``--only`` picks adapters (git, lfs, s3,
git-lfs).

Run: ``python -m benchmarks.bench_adapters [--size MIB] [--only lfs,git-lfs] [--push-rounds N]``
(default 1024 MiB, every adapter, no extra rounds).
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

from .common import git_env, report, sh, timed, verdict, workdir

MiB = 1024 * 1024
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
from lfs_helpers import ORG, credentials, giftless_server  # noqa: E402


def env(extra: dict | None = None) -> dict:
    e = git_env()
    e["PATH"] = f"{Path(sys.executable).parent}:{e.get('PATH', '')}"
    e.pop("GIT_DIR", None)
    e["GIT_TERMINAL_PROMPT"] = "0"
    return dict(e, **(extra or {}))


def pf(*args, cwd, extra=None):
    try:
        return sh("git-pf", *args, cwd=cwd, env=env(extra))
    except subprocess.CalledProcessError as e:  # say why before the traceback
        sys.stderr.write(e.stderr.decode(errors="replace"))
        raise


def git(*args, cwd, extra=None):
    return sh("git", *args, cwd=cwd, env=env(extra))


def du(path: Path) -> int:
    """Bytes of disk the files under ``path`` use (hard links once)."""
    seen, total = set(), 0
    for d, _, fs in os.walk(path):
        for f in fs:
            st = os.lstat(os.path.join(d, f))
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MiB), b""):
            h.update(block)
    return h.hexdigest()


def timed_push(fn, *args, **kwargs) -> float:
    """Seconds ``fn(*args)`` (a push) takes, started after ``sync``."""
    subprocess.run(["sync"], check=True)
    return timed(fn, *args, **kwargs)[0]


def make_file(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        left, n = size, 0
        while left:
            chunk = min(left, 64 * MiB)
            f.write(hashlib.shake_256(str(n).encode()).digest(chunk))  # incompressible, reproducible
            left -= chunk
            n += 1


def bench_pf(base: Path, world: Path, name: str, setup) -> dict:
    """git-pf through one adapter: snapshot, push, clone, checkout; disk after the push.
    ``setup(repo, pushing)`` configures a repository (the clone finds the adapter recorded)."""
    a, remote = base / f"{name}-a", base / f"{name}-remote.git"
    pf("init", a, cwd=base)
    git("init", "-q", "--bare", remote, cwd=base)
    git("remote", "add", "origin", f"file://{remote}", cwd=a)
    extra = setup(a, True) or {}
    pf("snapshot", "--fs-root", world, "-m", "X", cwd=a)
    before = du(a / ".git")
    out = {"push": timed_push(pf, "push", "-q", "origin", "main", cwd=a, extra=extra)}
    out["disk"] = du(a / ".git")
    out["disk_growth"] = out["disk"] - before
    b = base / f"{name}-b"
    out["clone"] = timed(pf, "clone", "-q", f"file://{remote}", b, cwd=base, extra=extra)[0]
    setup(b, False)
    out["checkout"] = timed(pf, "checkout", "main", "--into", base / f"{name}-c", cwd=b, extra=extra)[0]
    out["identical"] = digest(base / f"{name}-c" / "big.bin") == digest(world / "big.bin")
    return out


def bench_git_lfs(base: Path, world: Path, server) -> dict:
    """git-lfs's own client: add + commit (its clean filter), push to giftless, clone (smudge)."""
    a, remote = base / "gitlfs-a", base / "gitlfs-remote.git"
    git("init", "-q", a, cwd=base)
    git("init", "-q", "--bare", remote, cwd=base)
    git("lfs", "install", "--local", cwd=a)
    git("lfs", "track", "*.bin", cwd=a)
    os.link(world / "big.bin", a / "big.bin")  # no copy: git-lfs reads it where it is, as git-pf does
    git("remote", "add", "origin", f"file://{remote}", cwd=a)
    endpoint = f"{server.base}/{ORG}/gitlfs.git/info/lfs"
    lfsconfig = ["-c", f"lfs.url={endpoint}", "-c", f"credential.helper=store --file={base / 'creds'}"]
    (base / "creds").write_text(f"http://pf:secret@127.0.0.1%3a{server.port}\n")
    git("add", "-A", cwd=a)
    git("commit", "-qm", "X", cwd=a)
    out = {}
    out["push"] = timed_push(git, *lfsconfig, "push", "-q", "origin", "HEAD:refs/heads/main", cwd=a)
    out["disk"] = du(a / ".git")
    git("symbolic-ref", "HEAD", "refs/heads/main", cwd=remote)
    b = base / "gitlfs-b"
    out["clone"] = timed(git, *lfsconfig, "clone", "-q", f"file://{remote}", b, cwd=base)[0]
    out["checkout"] = 0.0  # git clone checks out (smudge) as part of the clone
    out["identical"] = digest(b / "big.bin") == digest(world / "big.bin")
    return out


def _new_origin(repo: Path, remote: Path) -> None:
    """Point ``origin`` at ``remote``, dropping what was known of the old one (git-lfs takes
    what the remote-tracking refs reach as already uploaded)."""
    git("remote", "remove", "origin", cwd=repo)
    git("remote", "add", "origin", f"file://{remote}", cwd=repo)


def cached_share(repo: Path) -> float:
    """The share of ``repo``'s large side-store frames (64 KiB or more) whose middle page is in
    the page cache: a push reads those from memory, the others from the disk."""
    from git_pf.store.directio import cached

    frames = [p for p in (repo / ".git" / "pf" / "objects").glob("??/*") if p.stat().st_size >= 64 * 1024]
    hits = 0
    for p in frames:
        fd = os.open(p, os.O_RDONLY)
        try:
            hits += cached(fd, os.fstat(fd).st_size // 2)
        finally:
            os.close(fd)
    return hits / max(len(frames), 1)


def push_rounds(base: Path, server, rounds: int) -> dict[str, list[float]]:
    """``rounds`` more pushes each of git-pf (lfs adapter) and git-lfs, interleaved (each goes
    first in every other round: on this VM a large write costs most when it takes fresh memory,
    and whichever runs second reuses what the first freed), from the repositories ``bench_pf``
    and ``bench_git_lfs`` left, each to a new bare remote and a new repository of the server
    (so every byte goes again); the seconds of each, and the load average and the share of
    git-pf's frames in the page cache before each of its pushes (``cached``)."""
    times: dict[str, list[float]] = {"lfs": [], "git-lfs": [], "load": [], "cached": []}
    for n in range(rounds):
        for name in (["lfs", "git-lfs"] if n % 2 == 0 else ["git-lfs", "lfs"]):
            remote = base / f"round{n}-{name}.git"
            git("init", "-q", "--bare", remote, cwd=base)
            endpoint = f"{server.base}/{ORG}/round{n}-{name}.git/info/lfs"
            if name == "lfs":
                a = base / "lfs-a"
                _new_origin(a, remote)
                git("config", "pf.remote.origin.store", "lfs:" + endpoint, cwd=a)
                times["cached"].append(cached_share(a))
                times["load"].append(os.getloadavg()[0])
                times[name].append(timed_push(pf, "push", "-q", "origin", "main", cwd=a))
            else:
                a = base / "gitlfs-a"
                _new_origin(a, remote)
                times[name].append(timed_push(git, "-c", f"lfs.url={endpoint}", "-c",
                                              f"credential.helper=store --file={base / 'creds'}",
                                              "push", "-q", "origin", "HEAD:refs/heads/main", cwd=a))
    return times


def _requests(lines: list[str]) -> str:
    """``batch / PUT / GET`` counts of giftless access-log lines."""
    batch = sum(1 for l in lines if l.startswith("POST ") and l.split()[1].endswith("/objects/batch"))
    return f"{batch} batch / {sum(l.startswith('PUT ') for l in lines)} PUT / {sum(l.startswith('GET ') for l in lines)} GET"


def moto_server(base: Path):
    """A moto S3 server on 127.0.0.1 when moto and the s3 adapter are installed, else None."""
    if importlib.util.find_spec("moto") is None or importlib.util.find_spec("boto3") is None or \
            importlib.util.find_spec("git_pf.transport.adapters.s3") is None:
        return None
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(200):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.05)
    proc.terminate()
    return None


S3_ENV = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench", "AWS_DEFAULT_REGION": "us-east-1"}


def run(size: int, only: set[str], rounds: int) -> int:
    rounds_run: dict[str, list[float]] = {}
    with workdir("adapters") as base, giftless_server(base / "lfs") as server:
        world = base / "world"
        make_file(world / "big.bin", size)
        got: dict[str, dict] = {}

        if "git" in only:
            got["git"] = bench_pf(base, world, "git", lambda repo, pushing: None)

        def lfs_setup(repo, pushing):
            credentials(repo, server)
            if pushing:
                git("config", "pf.remote.origin.store", "lfs:" + server.endpoint, cwd=repo)

        if "lfs" in only:
            seen = len(server.requests())
            got["lfs"] = bench_pf(base, world, "lfs", lfs_setup)
            got["lfs"]["requests"] = _requests(server.requests()[seen:])
        moto = moto_server(base) if "s3" in only else None
        if moto is not None:
            proc, url = moto
            try:
                import boto3

                boto3.client("s3", endpoint_url=url, **{k.lower(): v for k, v in S3_ENV.items()
                                                         if k != "AWS_DEFAULT_REGION"},
                             region_name="us-east-1").create_bucket(Bucket="bench")

                def s3_setup(repo, pushing):
                    git("config", "pf.s3.endpoint", url, cwd=repo)
                    if pushing:
                        git("config", "pf.remote.origin.store", "s3://bench/images", cwd=repo)
                    return S3_ENV

                os.environ.update(S3_ENV)
                got["s3"] = bench_pf(base, world, "s3", s3_setup)
            finally:
                proc.terminate()
        if "git-lfs" in only and subprocess.run(["git", "lfs", "version"], capture_output=True).returncode == 0:
            seen = len(server.requests())
            got["git-lfs"] = bench_git_lfs(base, world, server)
            got["git-lfs"]["requests"] = _requests(server.requests()[seen:])
            if rounds and "lfs" in got:
                rounds_run = push_rounds(base, server, rounds)

    ref = got.get("git-lfs")
    rows = []
    for name, r in got.items():
        e2e = r["push"] + r["clone"] + r["checkout"]
        rows.append((f"{name}: push / clone / checkout", f"{r['push']:.1f} / {r['clone']:.1f} / {r['checkout']:.1f} s",
                     "" if r["identical"] else "CONTENT DIFFERS"))
        if ref is not None and name != "git-lfs":
            ratio = e2e / (ref["push"] + ref["clone"] + ref["checkout"])
            rows.append((f"{name}: end to end vs git-lfs", f"{ratio:.2f}x", f"goal <= 1.0x: {verdict(ratio <= 1.0)}"))
        if "requests" in r:
            rows.append((f"{name}: requests at the LFS server", r["requests"], ""))
        disk = r["disk"] / size
        rows.append((f"{name}: local disk after push / object", f"{disk:.2f}x",
                     f"goal <= 1.1x: {verdict(disk <= 1.1)}" if name != "git-lfs" else "(git-lfs keeps .git/lfs/objects)"))
    if rounds_run:
        pf_push, ref_push = statistics.median(rounds_run["lfs"]), statistics.median(rounds_run["git-lfs"])
        rows.append((f"lfs push, {rounds} interleaved rounds (median)", f"{pf_push:.2f} s",
                     " ".join(f"{t:.2f}" for t in rounds_run["lfs"])))
        rows.append((f"git-lfs push, {rounds} interleaved rounds (median)", f"{ref_push:.2f} s",
                     " ".join(f"{t:.2f}" for t in rounds_run["git-lfs"])))
        rows.append(("lfs push vs git-lfs push", f"{pf_push / ref_push:.2f}x",
                     f"goal <= 1.0x: {verdict(pf_push <= ref_push)}"))
        rows.append(("per round: lfs / git-lfs", " ".join(f"{a / b:.2f}x" for a, b in zip(rounds_run["lfs"], rounds_run["git-lfs"])),
                     "load " + " ".join(f"{x:.1f}" for x in rounds_run["load"])))
        rows.append(("lfs frames in the page cache before each push", " ".join(f"{c:.0%}" for c in rounds_run["cached"]), ""))
    if ref is None and "git-lfs" in only:
        rows.append(("git-lfs", "not installed", "make bench installs it"))
    report(f"object adapters, one {size // MiB} MiB file (incompressible)", rows)
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024, help="size of the file in MiB (default 1024)")
    parser.add_argument("--only", default="git,lfs,s3,git-lfs", help="the adapters to run, comma-separated")
    parser.add_argument("--push-rounds", type=int, default=0, metavar="N",
                        help="N more interleaved pushes of lfs and git-lfs, for their medians")
    args = parser.parse_args()
    only = {a.strip() for a in args.only.split(",") if a.strip()}
    unknown = only - {"git", "lfs", "s3", "git-lfs"}
    if unknown:
        parser.error(f"unknown adapter(s): {', '.join(sorted(unknown))}")
    return run(args.size * MiB, only, args.push_rounds)


if __name__ == "__main__":
    sys.exit(main())
