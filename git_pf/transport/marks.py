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
The file mechanics are ``markfile.MarkFile``'s. Knows nothing of frames or
remotes.
"""
from __future__ import annotations

import re
from pathlib import Path

from ..core.markfile import MarkFile

HEADER = b"pf-rehashed 1\n"
_LINE = re.compile(rb"^([0-9a-f]{64})((?: [0-9a-f]{40}(?:[0-9a-f]{24})?)+)$")

Source = tuple[str, tuple[str, ...]]  # (oid, the git blobs its frame is read from)


def encode(source: Source) -> bytes:
    oid, blobs = source
    return f"{oid} {' '.join(blobs)}\n".encode("ascii")


def parse(line: bytes) -> Source | None:
    m = _LINE.match(line)
    return (m[1].decode(), tuple(m[2].decode().split())) if m else None


def Marks(path: Path) -> MarkFile[Source]:
    """The re-hash marks of one repository: ``source in marks``, ``marks.add(source)``."""
    return MarkFile(path, HEADER, parse, encode)
