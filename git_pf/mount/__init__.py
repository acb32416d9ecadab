"""git_pf.mount: the FUSE file system that serves an image's world as a directory.

Read-only, or copy-on-write with an upper layer under ``$GIT_DIR/pf/mounts/``
(docs/mount.md). Speaks the kernel's FUSE protocol itself (``session``,
``protocol``) and mounts through ``fusermount3``; the core never imports it.
"""
