"""Error types and the exit codes they map to.

Every failure a user can cause is a ``PfError`` with one human line; the CLI
prints it to stderr and exits with ``code``. This module imports nothing from
the rest of the package.
"""
from __future__ import annotations

# Exit codes (documented in docs/cli.md).
EXIT_OK = 0
EXIT_NEGATIVE = 1  # found problems (fsck, merge conflicts) or could not finish (disk full, I/O error)
EXIT_USAGE = 2  # bad input: flags, revisions, files, not a repository
EXIT_DATA = 3  # repository data is damaged or missing (corrupt or absent object)


class PfError(Exception):
    """A user-facing failure: one line of text and an exit code.

    ``param`` names the Python API parameter the message is about (``fs_root``): the
    message then reads ``fs_root: …`` and the CLI shows the flag instead (``--fs-root: …``)."""

    code = EXIT_USAGE

    def __init__(self, message: str, code: int | None = None, param: str | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.param = param

    @property
    def detail(self) -> str:
        """The message without the parameter's name."""
        return str(self.args[0])

    @property
    def message(self) -> str:
        return f"{self.param}: {self.detail}" if self.param else self.detail

    def __str__(self) -> str:
        return self.message


class UsageError(PfError):
    """Bad input from the user: a flag, a revision, a file."""

    code = EXIT_USAGE


class NotARepository(UsageError):
    pass


class UnknownRevision(UsageError):
    pass


class InputFormatError(UsageError):
    """A file the user handed us is malformed (names file and line)."""


class DataError(PfError):
    """Stored data is corrupt or missing."""

    code = EXIT_DATA


class CorruptObject(DataError):
    pass


class MissingObject(DataError):
    pass


class TransferFailed(PfError):
    """A transfer with a remote failed (git refused or the connection broke): not bad input."""

    code = EXIT_NEGATIVE


class WriteFailed(PfError):
    """Writing to the repository failed (disk full, file too large, I/O error)."""

    code = EXIT_NEGATIVE
