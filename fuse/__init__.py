"""git_pf.fuse: the pyfuse3 filesystem that serves an image's world as a directory.

Read-only, or copy-on-write with an upper layer under ``$GIT_DIR/pf/mounts/``
(docs/mount.md). Imports pyfuse3 and trio, so only the ``[fuse]`` extra's
commands import it; the core never does.
"""
