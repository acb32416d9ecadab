"""Re-hash marks: the held objects this repository has re-hashed, kept across processes.

A held object's name comes from a remote's listing, so the first read of it
from its git blobs re-hashes it with sha256 (``transport.held``). A mark
``(oid, blobs)`` records that this was done and the frame hashed to its
name. A git blob is named by a hash of its own bytes, so a mark stays true
for as long as the blobs exist: a later read, in any process, checks the
frame by its zstd checksum alone, as it does for the store's own directory.
Damage to a blob after it was marked is what that checksum catches.

The marks live in ``$GIT_DIR/pf/rehashed``, spec in docs/transport.md
("Re-hash marks"): a header line, then one line a mark, appended with one
``write`` each; a file without that header is not read, and is written anew
with the next mark. The file is read again when it grew (another process
marked something), from where this process stopped. A line that does not
parse (a write cut short) is skipped, which costs its object a re-hash and
nothing more. ``prune`` rewrites the file with the marks still wanted (gc).
A mark that cannot be written stays in this process only. Knows nothing of
frames or remotes.
"""
from __future__ import annotations

import os
import re
import threading
from pathlib import Path
from typing import Callable

HEADER = b"pf-rehashed 1\n"
_LINE = re.compile(rb"^([0-9a-f]{64})((?: [0-9a-f]{40}(?:[0-9a-f]{24})?)+)$")

Source = tuple[str, tuple[str, ...]]  # (oid, the git blobs its frame is read from)


def encode(source: Source) -> bytes:
    oid, blobs = source
    return f"{oid} {' '.join(blobs)}\n".encode("ascii")


def decode(data: bytes) -> tuple[set[Source], int]:
    """The marks in ``data`` (the file from some offset) and how many bytes were whole lines."""
    out: set[Source] = set()
    end = data.rfind(b"\n") + 1
    for line in data[:end].splitlines():
        m = _LINE.match(line)
        if m:
            out.add((m[1].decode(), tuple(m[2].decode().split())))
    return out, end


class Marks:
    """The marks of one repository: ``source in marks``, ``marks.add(source)``."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()
        self._marks: set[Source] = set()
        self._read_to = 0  # bytes of the file taken in (whole lines)
        self._file_id: tuple[int, int] | None = None  # (device, inode) those bytes came from
        self._foreign = False  # the file does not start with HEADER: written anew on the next mark

    def __contains__(self, source: Source) -> bool:
        if source in self._marks:
            return True
        self._take_in()
        return source in self._marks

    def add(self, source: Source) -> None:
        with self._lock:
            if source in self._marks:
                return
            self._marks.add(source)
        if self._foreign:
            self.prune(lambda s: True)
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return  # a repository this process may not write: the mark stays in memory
        try:
            if os.fstat(fd).st_size == 0:
                os.write(fd, HEADER)
            os.write(fd, encode(source))
        except OSError:
            pass
        finally:
            os.close(fd)

    def prune(self, keep: Callable[[Source], bool]) -> None:
        """Rewrite the file with the marks ``keep`` accepts (replaced at once; a mark another
        process adds meanwhile may be lost, and costs its object one re-hash)."""
        self._take_in()
        if not self._marks and not self.path.exists():
            return
        with self._lock:
            self._marks = {s for s in self._marks if keep(s)}
            body = HEADER + b"".join(encode(s) for s in sorted(self._marks))
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
        try:
            tmp.write_bytes(body)
            os.replace(tmp, self.path)
        except OSError:
            tmp.unlink(missing_ok=True)

    def _take_in(self) -> None:
        """Read what was appended since the last look (all of it when the file was replaced)."""
        try:
            with open(self.path, "rb") as f:
                st = os.fstat(f.fileno())
                with self._lock:
                    if (st.st_dev, st.st_ino) != self._file_id:
                        self._file_id, self._read_to, self._foreign = (st.st_dev, st.st_ino), 0, False
                    if st.st_size <= self._read_to:
                        return
                    f.seek(self._read_to)
                    data = f.read()
                    if self._read_to == 0 and not data.startswith(HEADER):
                        self._read_to, self._foreign = st.st_size, True  # not marks: none taken from it
                        return
                    marks, used = decode(data)
                    self._marks |= marks
                    self._read_to += used
        except OSError:
            return
