"""An append-only file of marks: facts about content-addressed objects, kept across processes.

A mark states something that stays true for as long as the objects it names
exist (a held object re-hashed to its name, a world tree found sound), so a
later process may skip the work that found it. The file is a header line
naming its format and version, then one mark a line, each appended with one
``write``; a file without that header is not read and is written anew with
the next mark (so a new version of a format starts afresh). The file is read
again when it grew (another process marked something), from where this
process stopped. A line that does not parse (a write cut short) is skipped,
which costs its object the work again and nothing more. ``prune`` rewrites
the file with the marks still wanted. A mark that cannot be written stays in
this process only. Knows nothing of what the marks mean.
"""
from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable, Generic, Hashable, TypeVar

T = TypeVar("T", bound=Hashable)


class MarkFile(Generic[T]):
    """The marks of one file: ``mark in marks``, ``marks.add(mark)``, ``marks.prune(keep)``."""

    def __init__(self, path: Path, header: bytes, parse: Callable[[bytes], T | None], encode: Callable[[T], bytes]):
        self.path, self.header, self.parse, self.encode = path, header, parse, encode
        self._lock = threading.Lock()
        self._marks: set[T] = set()
        self._read_to = 0  # bytes of the file taken in (whole lines)
        self._file_id: tuple[int, int] | None = None  # (device, inode) those bytes came from
        self._foreign = False  # the file does not start with the header: written anew on the next mark

    def __contains__(self, mark: T) -> bool:
        if mark in self._marks:
            return True
        self._take_in()
        return mark in self._marks

    def add(self, mark: T) -> None:
        with self._lock:
            if mark in self._marks:
                return
            self._marks.add(mark)
        if self._foreign:
            self.prune(lambda m: True)
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError:
            return  # a repository this process may not write: the mark stays in memory
        try:
            if os.fstat(fd).st_size == 0:
                os.write(fd, self.header)
            os.write(fd, self.encode(mark))
        except OSError:
            pass
        finally:
            os.close(fd)

    def prune(self, keep: Callable[[T], bool]) -> None:
        """Rewrite the file with the marks ``keep`` accepts (replaced at once; a mark another
        process adds meanwhile may be lost, and costs its object the work again)."""
        self._take_in()
        if not self._marks and not self.path.exists():
            return
        with self._lock:
            self._marks = {m for m in self._marks if keep(m)}
            body = self.header + b"".join(self.encode(m) for m in sorted(self._marks))
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
                    if self._read_to == 0 and not data.startswith(self.header):
                        self._read_to, self._foreign = st.st_size, True  # not marks: none taken from it
                        return
                    marks, used = self._decode(data)
                    self._marks |= marks
                    self._read_to += used
        except OSError:
            return

    def _decode(self, data: bytes) -> tuple[set[T], int]:
        """The marks in ``data`` (the file from some offset) and how many bytes were whole lines."""
        out: set[T] = set()
        end = data.rfind(b"\n") + 1
        for line in data[:end].splitlines():
            mark = self.parse(line)
            if mark is not None:
                out.add(mark)
        return out, end
