"""Storage of large content outside git's object database: the side store and its formats.

Holds the side store (``sidestore``: content-addressed objects, held objects;
its zstd frames and object names in ``frames``, object files in ``objectio``,
chunked large content and chunk indexes in ``large``, the whole-content
hashes it computed in ``hashed``, frames stored raw read in place in
``rawframes``), pointer blobs
(``pointer``), content-defined chunking (``chunking``), git pack files written
by hand (``packfile``) and direct I/O (``directio``). It may import only the package's utilities (``errors``,
``cores``, ``limits``, ``writeback``) and third-party libraries: never an image,
a layer, a ref, the transport or the CLI (docs/architecture.md).
"""
