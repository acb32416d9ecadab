"""git_pf.transport: images and their side-store objects over any git remote.

One module per concept: ``gitcmd`` (running git), ``remotes`` (naming a
remote, its tracking refs and adapter), ``index`` (the ``refs/pf/objects``
layout), ``reach`` (which side-store objects images reach), ``adapters``
(choosing one), ``gitstore`` / ``filestore`` / ``lfsstore`` (+ ``lfsauth``) /
``s3store`` (the adapters), ``storerecord`` (the adapter a remote records,
``refs/pf/meta/store``), ``held`` (objects kept as git blobs,
listed by the repository's own ``refs/pf/objects``), ``push`` / ``fetch``
(planning and running transfers), ``lazy`` (fetch-on-read), ``install``
(hooks and remote config), ``gc`` and ``fsckext``. Spec: docs/transport.md.
Touches no image format and never edits foundation state other than refs
under ``refs/pf/remotes/``, ``refs/pf/objects``, ``refs/pf/meta/`` and the local side store.
"""
