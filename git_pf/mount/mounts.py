"""The registry of mounts: ``$GIT_DIR/pf/mounts/<id>/`` state directories.

Each mount records itself in ``mount.json`` (image, daemon pid, mountpoint,
mode, branch; docs/mount.md) and keeps its copy-on-write upper layer in
``upper/``. This module reads and writes those records, tells live mounts
from stale ones, finds the state to resume for an image + directory, and
unmounts. It knows the upper layer's marker names but never reads file
contents and never imports pyfuse3.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import EXIT_NEGATIVE, PfError, UsageError
from ..core.liveness import pid_alive

FORMAT = 1
WHITEOUT_PREFIX = ".pf-wh."  # upper/<dir>/.pf-wh.<name>: <name> is deleted from the lower layer
FSNAME = "git-pf"


@dataclass
class MountState:
    id: str
    dir: Path  # the state directory
    image: str
    pid: int
    mountpoint: str
    mode: str  # "ro" | "rw"
    branch: str | None

    @property
    def upper(self) -> Path:
        return self.dir / "upper"

    @property
    def control(self) -> bytes:
        """The daemon's control socket (abstract namespace: no path length limit, no file)."""
        return b"\0git-pf-mount-" + hashlib.sha256(os.fsencode(self.dir)).hexdigest()[:32].encode()

    @property
    def log(self) -> Path:
        return self.dir / "daemon.log"

    def to_record(self) -> dict:
        return {"image": self.image, "pid": self.pid, "mountpoint": self.mountpoint, "mode": self.mode,
                "branch": self.branch, "format": FORMAT}

    def save(self, durable: bool = False) -> None:
        """Write ``mount.json`` atomically (temp, rename; fsync too when ``durable``)."""
        data = json.dumps(self.to_record(), sort_keys=True, separators=(",", ":")).encode() + b"\n"
        fd, tmp = tempfile.mkstemp(dir=self.dir, prefix=".mount.json.")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if durable:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, self.dir / "mount.json")
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def status(self) -> str:
        """``mounted`` (daemon alive, kernel mount present), ``stale`` (mount present, daemon
        gone), or ``unmounted`` (only the state is left)."""
        mounted = is_mounted(self.mountpoint)
        if mounted and pid_alive(self.pid):
            return "mounted"
        return "stale" if mounted else "unmounted"

    def upper_size(self) -> int:
        total = 0
        for base, dirs, files in os.walk(self.upper):
            for name in files:
                try:
                    total += os.lstat(os.path.join(base, name)).st_blocks * 512
                except FileNotFoundError:
                    pass
        return total

    def to_json(self) -> dict:
        return {"id": self.id, "image": self.image, "mountpoint": self.mountpoint, "mode": self.mode,
                "pid": self.pid, "branch": self.branch, "status": self.status(), "upper_bytes": self.upper_size()}


def root(git_dir: Path) -> Path:
    return Path(git_dir) / "pf" / "mounts"


def load(state_dir: Path) -> MountState | None:
    try:
        rec = json.loads((state_dir / "mount.json").read_bytes())
        if rec.get("format", 1) > FORMAT:
            return None  # written by a newer git-pf: leave it alone
        return MountState(state_dir.name, state_dir, rec["image"], int(rec["pid"]), rec["mountpoint"],
                          rec["mode"], rec.get("branch"))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def all_states(git_dir: Path) -> list[MountState]:
    base = root(git_dir)
    if not base.is_dir():
        return []
    found = (load(d) for d in sorted(base.iterdir()) if d.is_dir())
    return [s for s in found if s is not None]


def create(git_dir: Path, image: str, mountpoint: str, mode: str, branch: str | None) -> MountState:
    state_dir = root(git_dir) / secrets.token_hex(8)
    (state_dir / "upper").mkdir(parents=True)
    state = MountState(state_dir.name, state_dir, image, 0, mountpoint, mode, branch)
    state.save()
    return state


def for_mountpoint(git_dir: Path, mountpoint: str) -> list[MountState]:
    return [s for s in all_states(git_dir) if s.mountpoint == mountpoint]


def canonical(directory: str | os.PathLike) -> str:
    """The absolute path of a mountpoint without touching it (a dead mount cannot be stat'ed)."""
    path = os.path.abspath(directory)
    parent, name = os.path.split(path)
    return os.path.join(os.path.realpath(parent), name)


def unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def fsname(git_dir: str | os.PathLike) -> str:
    r"""The ``fsname`` mount option of a mount of ``git_dir``: ``git-pf:<git dir>``, so the kernel's
    mount table names each mount's repository (fusermount3 reads ``\\`` and ``\,`` as escapes)."""
    return FSNAME + ":" + os.fspath(git_dir).replace("\\", "\\\\").replace(",", "\\,")


def listed() -> dict[str, str | None]:
    """Every git-pf FUSE mount the kernel lists: mountpoint -> its git directory (None for a
    mount made before the fsname carried it)."""
    found: dict[str, str | None] = {}
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                parts = line.split(" ")
                if len(parts) < 3:
                    continue
                source = unescape(parts[0])
                if source == FSNAME:
                    found[unescape(parts[1])] = None
                elif source.startswith(FSNAME + ":") and len(source) > len(FSNAME) + 1:
                    found[unescape(parts[1])] = source[len(FSNAME) + 1:]
    except OSError:
        pass
    return found


def is_mounted(mountpoint: str) -> bool:
    """True when a git-pf FUSE filesystem is mounted at ``mountpoint``."""
    return mountpoint in listed()


def unmount(mountpoint: str, lazy: bool = False) -> None:
    """Detach the kernel mount (``fusermount3 -u``, ``-z`` for a lazy detach)."""
    args = ["fusermount3", "-u"] + (["-z"] if lazy else []) + ["--", mountpoint]
    try:
        proc = subprocess.run(args, capture_output=True, text=True)
    except FileNotFoundError:
        raise UsageError("fusermount3 is not installed (install the fuse3 package)") from None
    if proc.returncode != 0 and is_mounted(mountpoint):
        msg = (proc.stderr.strip().splitlines() or ["unknown error"])[-1]
        raise UsageError(f"cannot unmount '{mountpoint}': {msg}")


def upper_is_empty(state: MountState) -> bool:
    try:
        return not any(os.scandir(state.upper))
    except FileNotFoundError:
        return True


def discard(state: MountState) -> None:
    shutil.rmtree(state.dir, ignore_errors=True)


class DaemonLost(PfError):
    """The mount daemon ended, or stopped answering, in the middle of a conversation."""

    code = EXIT_NEGATIVE


class Control:
    """A connection to a mount daemon: one JSON object per line each way."""

    def __init__(self, state: MountState, timeout: float = 30.0):
        self.where = state.mountpoint
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(state.control)
        except OSError:
            self.sock.close()
            raise UsageError(f"the daemon of the mount at '{state.mountpoint}' does not answer") from None
        self.file = self.sock.makefile("rwb")

    def ask(self, request: dict) -> dict:
        """The daemon's reply; DaemonLost when it ends or stays silent, UsageError when it refuses."""
        try:
            self.file.write(json.dumps(request).encode() + b"\n")
            self.file.flush()
            line = self.file.readline()
            reply = json.loads(line) if line else None
        except (OSError, ValueError) as e:
            why = "it did not answer in time" if isinstance(e, TimeoutError) else "the connection broke"
            raise DaemonLost(f"the daemon of the mount at '{self.where}' stopped answering ({why})") from None
        if not isinstance(reply, dict):
            raise DaemonLost(f"the daemon of the mount at '{self.where}' ended (it closed the connection)")
        if not reply.get("ok"):
            raise UsageError(f"the mount daemon refused: {reply.get('error', 'unknown error')}")
        return reply

    def try_ask(self, request: dict) -> None:
        """Send ``request`` when the daemon is still there; no error when it is not."""
        try:
            self.ask(request)
        except PfError:
            pass

    def close(self) -> None:
        for part in (self.file, self.sock):
            try:
                part.close()  # closing flushes: a daemon that is gone makes that fail
            except OSError:
                pass


def everywhere() -> list[dict]:
    """Every git-pf mount the kernel lists, each as its record's ``to_json`` plus ``repository``
    (the git directory its fsname names); a mount without a readable record has ``image`` null
    and status ``unrecorded``."""
    rows = []
    for mp, git_dir in sorted(listed().items()):
        try:
            states = [s for s in for_mountpoint(Path(git_dir), mp) if s.status() != "unmounted"] if git_dir else []
        except OSError:  # a repository this user cannot read
            states = []
        row = states[0].to_json() if states else {
            "id": None, "image": None, "mountpoint": mp, "mode": None, "pid": None, "branch": None,
            "status": "unrecorded", "upper_bytes": 0}
        rows.append(dict(row, repository=git_dir))
    return rows
