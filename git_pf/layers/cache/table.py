"""``cache/pages.json``: the KV page table of an image (docs/cache.md).

Holds the layout tag (with dtype and shapes spelled out), the model
fingerprint and adapter id, the token ids, and per page its chain id, the
sha256 of its stored bytes (which is also its side-store object name) and its
size. The table's version says how a page object holds the page bytes:
``pf-kv/2`` as byte planes (``planes``), ``pf-kv/1`` (older images) as they are.
Encodes as canonical JSON and decodes with full validation: a table that
does not agree with itself is a ``DataError``. No torch, no side-store I/O.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ...core import canonjson
from ...core.errors import DataError
from . import pages as pg

PATH = b"cache/pages.json"
RAW, BYTE_PLANES = "raw", "byte-planes"  # how a page object holds the page bytes
VERSIONS = {"pf-kv/1": RAW, "pf-kv/2": BYTE_PLANES}  # pages.json version -> page objects
WRITTEN = {encoding: version for version, encoding in VERSIONS.items()}
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class Page:
    id: str  # chain id (pages.page_id)
    sha256: str  # hash of the stored page (see PageTable.encoding) = side-store object name
    size: int  # bytes


@dataclass(frozen=True)
class PageTable:
    layout: pg.Layout
    model: str
    adapter: str | None
    tokens: tuple[int, ...]
    pages: tuple[Page, ...]
    encoding: str = BYTE_PLANES  # how each page object holds the page bytes (RAW for pf-kv/1 tables)

    @property
    def nbytes(self) -> int:
        return sum(p.size for p in self.pages)

    def spans(self) -> list[tuple[int, int]]:
        return pg.spans(len(self.tokens), self.layout.page_tokens)

    def oids(self) -> list[str]:
        """Side-store objects this table needs, in page order (deduplicated)."""
        return list(dict.fromkeys(p.sha256 for p in self.pages))

    def to_json(self) -> dict:
        lay = self.layout
        return {
            "version": WRITTEN[self.encoding],
            "layout": lay.tag(),
            "dtype": lay.dtype,
            "page_tokens": lay.page_tokens,
            "layers": [{"k": list(k), "v": list(v)} for k, v in zip(lay.k_shapes, lay.v_shapes)],
            "model": self.model,
            "adapter": self.adapter,
            "tokens": list(self.tokens),
            "pages": [{"id": p.id, "sha256": p.sha256, "size": p.size} for p in self.pages],
        }

    def encode(self) -> bytes:
        return canonjson.encode(self.to_json())

    def summary(self) -> dict:
        """The manifest entry: tokens, pages, bytes, page size and dtype.

        Pages shared with the parent are not recorded here (a fact about the
        commit, not the state; it would make an unchanged cache re-snapshot to a
        new tree); ``sharing`` computes them."""
        return {"tokens": len(self.tokens), "pages": len(self.pages), "bytes": self.nbytes,
                "page_tokens": self.layout.page_tokens, "dtype": self.layout.dtype}

    def shared_with(self, other: "PageTable | None") -> tuple[int, int]:
        """(pages, bytes) of this table whose page id ``other`` also holds."""
        ids = {p.id for p in other.pages} if other is not None else set()
        shared = [p for p in self.pages if p.id in ids]
        return len(shared), sum(p.size for p in shared)


def decode(data: bytes) -> PageTable:
    """Parse and check a pages.json; raises DataError naming what is wrong."""
    try:
        doc = canonjson.loads(data)
        table = _from_json(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as e:
        raise DataError(f"cache/pages.json is damaged: {e}") from None
    _check(table, doc)
    return table


def _from_json(doc: dict) -> PageTable:
    encoding = VERSIONS.get(doc.get("version"))
    if encoding is None:
        raise ValueError(f"unsupported KV cache format {doc.get('version')!r} "
                         f"(this git-pf reads {', '.join(VERSIONS)})")
    layout = pg.Layout.parse(doc["layout"])
    tokens = tuple(doc["tokens"])
    pg.encode_tokens(tokens)  # range check
    pages = tuple(Page(str(p["id"]), str(p["sha256"]), int(p["size"])) for p in doc["pages"])
    adapter = doc["adapter"]
    if not isinstance(doc["model"], str) or not (adapter is None or isinstance(adapter, str)):
        raise ValueError("model and adapter must be strings")
    return PageTable(layout, doc["model"], adapter, tokens, pages, encoding)


def _check(table: PageTable, doc: dict) -> None:
    lay = table.layout
    spelled = {"dtype": lay.dtype, "page_tokens": lay.page_tokens,
               "layers": [{"k": list(k), "v": list(v)} for k, v in zip(lay.k_shapes, lay.v_shapes)]}
    for key, want in spelled.items():
        if doc.get(key) != want:
            raise DataError(f"cache/pages.json is damaged: '{key}' disagrees with the layout tag")
    spans = table.spans()
    if len(spans) != len(table.pages):
        raise DataError(f"cache/pages.json is damaged: {len(table.tokens)} tokens need {len(spans)} pages, "
                        f"the table lists {len(table.pages)}")
    for (a, b), page in zip(spans, table.pages):
        if not (_HEX64.match(page.id) and _HEX64.match(page.sha256)):
            raise DataError("cache/pages.json is damaged: a page id or hash is not 64 hex digits")
        if page.size != (b - a) * lay.token_bytes:
            raise DataError(f"cache/pages.json is damaged: page {page.id[:12]} has size {page.size}, "
                            f"the layout needs {(b - a) * lay.token_bytes}")
    expected = pg.chain(list(table.tokens), table.model, table.adapter, lay)
    if [p.id for p in table.pages] != expected:
        raise DataError("cache/pages.json is damaged: page ids do not match the hash chain of its tokens")


def read(repo, tree: str) -> PageTable | None:
    """The page table of an image tree, or None when the image has no cache."""
    from ...image.manifest import read_file

    data = read_file(repo.git, tree, PATH)
    return decode(data) if data is not None else None


def object_refs(git, tree_hex: str) -> list[str]:
    """Side-store objects an image tree's KV cache needs (for push, fetch, gc, fsck reachability)."""
    from ...image.manifest import read_file

    data = read_file(git, tree_hex, PATH)
    return decode(data).oids() if data is not None else []


def sharing(repo, image) -> dict | None:
    """Tokens, pages, bytes of an image's cache and how much of it its first parent already holds."""
    from ...image.manifest import read_image

    table = read(repo, image.tree)
    if table is None:
        return None
    parent = None
    if image.parents:
        try:
            parent = read(repo, read_image(repo.git, image.parents[0]).tree)
        except DataError:
            parent = None
    pages, nbytes = table.shared_with(parent)
    return {"tokens": len(table.tokens), "pages": len(table.pages), "bytes": table.nbytes,
            "shared_pages": pages, "shared_bytes": nbytes}
