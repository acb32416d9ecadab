"""Random file operations give the same tree in an --rw mount as in a plain directory."""
from __future__ import annotations

import errno
import os
import random
import shutil

from mount_helpers import describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def _entries(root, rng, want_dir=None):
    out = []
    for base, dirs, files in os.walk(root):
        rel = os.path.relpath(base, root)
        for name in (dirs if want_dir in (None, True) else []) + (files if want_dir in (None, False) else []):
            out.append(os.path.normpath(os.path.join(rel, name)))
    return sorted(out)


def _step(rng, roots):
    """One random operation, applied to every root; the outcome (errno or ok) must agree."""
    a = roots[0]
    files = [p for p in _entries(a, rng, False) if not os.path.islink(os.path.join(a, p))]
    dirs = ["."] + _entries(a, rng, True)
    dirs = [d for d in dirs if not os.path.islink(os.path.join(a, d))]
    name = f"n{rng.randrange(40)}"
    op = rng.choice(["create", "append", "write_at", "truncate", "unlink", "mkdir", "rmdir", "rename_file",
                     "rename_dir", "chmod", "symlink", "xattr"])
    d = rng.choice(dirs)
    f = rng.choice(files) if files else None
    data = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 3000)))
    off = rng.randrange(0, 200_000)
    target_dir = rng.choice(dirs)
    mode = rng.choice([0o600, 0o644, 0o755, 0o700])
    key = f"user.k{rng.randrange(3)}"

    def apply(root):
        p = lambda rel: os.path.join(root, rel)  # noqa: E731
        if op == "create":
            with open(p(os.path.join(d, name)), "wb") as fh:
                fh.write(data)
        elif op == "append" and f:
            with open(p(f), "ab") as fh:
                fh.write(data)
        elif op == "write_at" and f:
            fd = os.open(p(f), os.O_WRONLY)
            try:
                os.pwrite(fd, data, off)
            finally:
                os.close(fd)
        elif op == "truncate" and f:
            os.truncate(p(f), off // 4)
        elif op == "unlink" and f:
            os.unlink(p(f))
        elif op == "mkdir":
            os.mkdir(p(os.path.join(d, name)))
        elif op == "rmdir" and d != ".":
            os.rmdir(p(d))
        elif op == "rename_file" and f:
            os.rename(p(f), p(os.path.join(target_dir, name)))
        elif op == "rename_dir" and d != "." and not (target_dir + "/").startswith(d + "/"):
            os.rename(p(d), p(os.path.join(target_dir, name)))
        elif op == "chmod" and f:
            os.chmod(p(f), mode)
        elif op == "symlink":
            os.symlink(name, p(os.path.join(d, name)))
        elif op == "xattr" and f:
            os.setxattr(p(f), key, data[:50])

    outcomes = []
    for root in roots:
        try:
            apply(root)
            outcomes.append("ok")
        except OSError as e:
            outcomes.append(errno.errorcode.get(e.errno, str(e.errno)))
    assert len(set(outcomes)) == 1, (op, d, f, target_dir, name, outcomes)


def test_random_operations_match_a_plain_directory(pf):
    sb = make_sandbox(pf.root)
    shutil.rmtree(sb / ".git")  # git refuses '.git' names only in trees; keep the comparison simple
    image = snapshot(pf, sb, "--name", "agent")
    pf.run("checkout", image, "--into", str(pf.root / "plain"))
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    rng = random.Random(11)
    for batch in range(6):
        for _ in range(50):
            _step(rng, [pf.root / "plain", mnt])
        assert describe(mnt) == describe(pf.root / "plain"), f"batch {batch}"
        if batch % 2 == 1:  # snapshots in between: the mount carries on from each new image
            new = pf.run("snapshot", "--mount", str(mnt), "-q").stdout.strip()
            co = pf.root / f"co{batch}"
            pf.run("checkout", new, "--into", str(co))
            assert describe(co) == describe(pf.root / "plain")
            assert describe(mnt) == describe(pf.root / "plain")
