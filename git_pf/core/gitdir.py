"""Where a repository's git directory is, and where this user's servers of it listen.

``find_git_dir`` finds the git directory as git does, without pygit2 or a git process, and
``common_dir`` the one a linked work tree shares with its main repository;
``socket_path`` names a server's socket in this user's private runtime directory
(``private_dir``), keyed by the git directory: the command server's (``cli.client``) and the
Claude Code hook server's (``integrations.claude_code_hook``). Both clients run on every call,
so this module imports only modules loaded at start-up and C modules. Makes the private
directory when missing; writes nothing else.
"""
from __future__ import annotations

import os

SUN_PATH_MAX = 107  # sun_path is 108 bytes with its NUL


def find_git_dir(start: str) -> str | None:
    """The git directory for ``start`` as git finds it: ``$GIT_DIR`` when set, else searching
    upwards (a ``.git`` directory or ``gitdir:`` file, or a bare repository); None when there is
    none. No pygit2 and no git process: the command server's client and the Claude Code hook
    client run it on every call."""
    env = os.environ.get("GIT_DIR")
    if env:
        return os.path.realpath(env) if os.path.isdir(env) else None
    d = os.path.abspath(start)
    while True:
        dot = os.path.join(d, ".git")
        if os.path.isdir(dot):
            return os.path.realpath(dot)
        if os.path.isfile(dot):
            try:
                with open(dot) as f:
                    line = f.readline().strip()
            except (OSError, UnicodeDecodeError):
                return None
            if not line.startswith("gitdir:"):
                return None
            return os.path.realpath(os.path.join(d, line[len("gitdir:"):].strip()))
        if os.path.isfile(os.path.join(d, "HEAD")) and os.path.isdir(os.path.join(d, "objects")) \
                and os.path.isdir(os.path.join(d, "refs")):
            return os.path.realpath(d)
        up = os.path.dirname(d)
        if up == d:
            return None
        d = up


def common_dir(git_dir: str | os.PathLike) -> str:
    """The directory holding the objects, refs and config that ``git_dir`` shares: for a linked
    work tree's git directory (``.git/worktrees/NAME``, with a ``commondir`` file) the main git
    directory, else ``git_dir`` itself. Images, packs and the side store live there, so every
    work tree of a repository sees the same ones."""
    git_dir = os.fspath(git_dir)
    try:
        with open(os.path.join(git_dir, "commondir")) as f:
            rel = f.read().strip()
    except (OSError, UnicodeDecodeError):
        return git_dir
    return os.path.normpath(os.path.join(git_dir, rel)) if rel else git_dir


def socket_path(git_dir: str, kind: str = "") -> str | None:
    """Where the server of ``git_dir`` listens: a private (0700) directory of this user, the
    socket named by a hash of the git directory (and ``kind``, for another server of the same
    repository: the Claude Code hook server's); None when no such directory can be trusted.
    Never inside the repository: a socket there breaks a plain copy of it (``shutil.copytree``,
    ``rsync``, ``tar``), and a copy would carry it."""
    import _sha256

    base = private_dir()
    if base is None:
        return None
    path = os.path.join(base, _sha256.sha256(os.fsencode(git_dir)).hexdigest()[:24] + (f"-{kind}" if kind else "") + ".sock")
    return path if len(os.fsencode(path)) <= SUN_PATH_MAX else None


def private_dir() -> str | None:
    """This user's directory for sockets with short paths (``$XDG_RUNTIME_DIR/git-pf``, else
    ``/tmp/git-pf-UID``): made 0700 when missing, refused when another user owns it or others
    may write to it."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    base = os.path.join(runtime, "git-pf") if runtime and os.path.isabs(runtime) else f"/tmp/git-pf-{os.getuid()}"
    try:
        os.mkdir(base, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return None
    try:
        st = os.lstat(base)
    except OSError:
        return None
    if st.st_uid != os.getuid() or (st.st_mode & 0o077) or (st.st_mode & 0o170000) != 0o040000:
        return None
    return base
