"""kill -9 of a mount daemon loses no fsync'd write (umount, re-mount, everything is there); SIGTERM stops it cleanly."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

from mount_helpers import describe, make_sandbox, pf, requires_fuse, snapshot  # noqa: F401

pytestmark = requires_fuse


def _write_synced(path, data: bytes) -> None:
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)


def test_kill_daemon_then_remount_keeps_fsynced_writes(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    (mnt / "journal").mkdir()
    for i in range(30):
        _write_synced(mnt / "journal" / f"{i:03}.rec", f"record {i}\n".encode() * 100)
    _write_synced(mnt / "src" / "main.py", b"print('changed')\n")
    os.rename(mnt / "run.sh", mnt / "run2.sh")
    os.unlink(mnt / "secret.txt")
    fd = os.open(mnt / "data.bin", os.O_WRONLY)
    os.pwrite(fd, b"PATCH", 123_456)
    os.fsync(fd)
    os.close(fd)
    before = describe(mnt)

    pid = pf.states()[0]["pid"]
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
        time.sleep(0.05)
    status = json.loads(pf.run("mounts", "--json").stdout)[0]["status"]
    assert status == "stale"
    bad = pf.run("mount", "agent", str(mnt), "--rw", check=False)
    assert bad.returncode == 2 and "stale mount" in bad.stderr

    pf.run("umount", str(mnt))  # lazy detach of the dead mount; the upper layer stays
    assert [s["status"] for s in json.loads(pf.run("mounts", "--json").stdout)] == ["unmounted"]
    pf.mount("agent", mnt, "--rw")
    assert describe(mnt) == before
    assert (mnt / "data.bin").read_bytes()[123_456:123_461] == b"PATCH"

    # the resumed mount snapshots as usual; afterwards a plain umount leaves nothing behind
    pf.run("snapshot", "--mount", str(mnt), "-q")
    pf.run("umount", str(mnt))
    assert pf.states() == []


def test_umount_keeps_unsnapshotted_changes_until_discarded(pf):
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt", "--rw")
    (mnt / "note.txt").write_text("keep me\n")
    out = pf.run("umount", str(mnt))
    assert "kept unsnapshotted changes" in out.stderr
    pf.mount("agent", mnt, "--rw")
    assert (mnt / "note.txt").read_text() == "keep me\n"
    pf.run("umount", "--discard", str(mnt))
    assert pf.states() == []
    pf.mount("agent", mnt, "--rw")
    assert not (mnt / "note.txt").exists()


def test_sigterm_stops_a_busy_mount_cleanly(pf):
    """SIGTERM reaches the daemon between requests even while a program keeps it busy."""
    sb = make_sandbox(pf.root)
    snapshot(pf, sb, "--name", "agent")
    mnt = pf.mount("agent", pf.root / "mnt")
    reader = subprocess.Popen([sys.executable, "-c", READ_FOREVER, str(mnt)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        assert reader.poll() is None  # still reading through the mount
        pid = pf.states()[0]["pid"]
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while os.path.exists(f"/proc/{pid}") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not os.path.exists(f"/proc/{pid}")
    finally:
        reader.kill()
        reader.wait()
    with open("/proc/mounts") as f:
        assert str(mnt) not in f.read()
    assert pf.states() == []  # a clean stop of a read-only mount leaves no state


READ_FOREVER = """
import os, sys
root = sys.argv[1]
while True:
    for base, dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(base, name)
            if os.path.isfile(path) and not os.path.islink(path):
                with open(path, "rb") as f:
                    f.read()
"""
