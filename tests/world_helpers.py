"""Building sandbox trees and describing them exactly, for round-trip assertions."""
from __future__ import annotations

import os
import stat
from pathlib import Path


def describe(root: Path | str) -> dict[bytes, tuple]:
    """Every path under root (not following symlinks) -> (kind, permission bits, content or
    link target, sorted user.* xattrs). Directories included; ``.pf`` at the top skipped."""
    root_b = os.fsencode(root)
    out: dict[bytes, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root_b):
        if dirpath == root_b and b".pf" in dirnames:
            dirnames.remove(b".pf")
        for name in dirnames + filenames:
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root_b)
            st = os.lstat(path)
            xattrs = ()
            if not stat.S_ISLNK(st.st_mode):
                xattrs = tuple(sorted((n, os.getxattr(path, n)) for n in os.listxattr(path) if n.startswith("user.")))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", None, os.readlink(path), ())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", stat.S_IMODE(st.st_mode), None, xattrs)
            elif not stat.S_ISREG(st.st_mode):  # a fifo, a socket: never opened
                out[rel] = ("other", stat.S_IMODE(st.st_mode), None, xattrs)
            else:
                with open(path, "rb") as f:
                    out[rel] = ("file", stat.S_IMODE(st.st_mode), f.read(), xattrs)
    return out


def make_sandbox(root: Path, big: int = 0) -> Path:
    """A sandbox with every kind of thing a snapshot must keep."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("print('hello')\n")
    (root / "src" / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "src" / "run.sh", 0o755)
    (root / "notes.txt").write_text("notes\n")
    os.setxattr(root / "notes.txt", "user.origin", b"agent\x00\xff")
    (root / "empty.txt").write_bytes(b"")
    (root / "secret.key").write_bytes(b"k")
    os.chmod(root / "secret.key", 0o600)
    (root / "empty_dir").mkdir()
    (root / "deep" / "er" / "est").mkdir(parents=True)
    (root / "link_rel").symlink_to("src/main.py")
    (root / "link_abs").symlink_to("/nonexistent/absolute/target")
    (root / "link_dir").symlink_to("src")
    with open(os.path.join(os.fsencode(root), b"caf\xe9-latin1.txt"), "wb") as f:
        f.write(b"non-utf8 name\n")
    (root / "inner").mkdir()
    (root / "inner" / ".git").mkdir()
    (root / "inner" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "ro_dir").mkdir()
    (root / "ro_dir" / "f").write_text("x")
    os.chmod(root / "ro_dir", 0o555)
    if big:
        (root / "model.bin").write_bytes(os.urandom(big))
    return root


def make_grid(root: Path, dirs: int, files: int, content=lambda d, f: f"{d}/{f}\n".encode()) -> Path:
    """``dirs`` directories ``d<i>`` of ``files`` files ``f<j>.txt`` each; returns root."""
    for d in range(dirs):
        (root / f"d{d}").mkdir(parents=True)
        for f in range(files):
            (root / f"d{d}" / f"f{f}.txt").write_bytes(content(d, f))
    return root


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie counts: it waits only to be reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True
