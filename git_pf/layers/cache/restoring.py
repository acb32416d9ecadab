"""Restoring an image's KV cache: verified page bytes back into tensors, bit for bit.

Refuses (``CacheMismatch``) when the caller's model fingerprint, adapter or
layout differs from the recorded one; every page is read by its sha256 in
``cache/pages.json`` and checked by the side store (its frame's content
checksum where the object is in the repository's own store, which checked its
name on the way in; a sha256 of its bytes where it is held elsewhere), then
joined from its byte planes (``planes``) into place. Given the tokens of a
context, only the longest prefix of them the cache holds is restored, from
the pages that hold it. Writes nothing.
"""
from __future__ import annotations

from ...core.errors import UsageError
from ...core.sequences import common_prefix
from . import planes, tensors, threads
from .pages import DTYPES, batches
from .paging import fingerprint, token_list
from .table import BYTE_PLANES, PageTable, read

_UNSET = object()


class CacheMismatch(UsageError):
    """The cache was captured for another model, adapter or layout."""


def _open(image_or_rev, repo):
    from ...image.manifest import ImageInfo
    from ...repo import Repo

    if repo is None or isinstance(repo, (str, bytes)) or hasattr(repo, "__fspath__"):
        repo = Repo.open(repo or ".")
    image = image_or_rev if isinstance(image_or_rev, ImageInfo) else repo.resolve(image_or_rev)
    return repo, image


def load_table(image_or_rev, repo=None) -> tuple[object, PageTable]:
    """The repo and the page table of an image; UsageError when it has no cache."""
    repo, image = _open(image_or_rev, repo)
    table = read(repo, image.tree)
    if table is None:
        raise UsageError(f"image {image.short} has no KV cache")
    return repo, table


def _expected_shapes(config) -> tuple[int, int, int]:
    cfg = config.get_text_config(decoder=True) if hasattr(config, "get_text_config") else config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return cfg.num_hidden_layers, heads, head_dim


def check(table: PageTable, model, adapter, config=None, dtype=None) -> None:
    """Refuse a table recorded for another model, adapter or layout."""
    want = fingerprint(model)
    if want != table.model:
        raise CacheMismatch(f"KV cache was captured for model '{table.model}', not '{want}'; refusing to restore")
    if adapter != table.adapter:
        raise CacheMismatch(f"KV cache was captured with adapter {table.adapter!r}, not {adapter!r}; refusing to restore")
    lay = table.layout
    if config is None and hasattr(model, "config"):
        config = model.config
    if dtype is None and hasattr(model, "dtype") and not isinstance(model, str):
        dtype = model.dtype
    if dtype is not None and tensors.dtype_name(dtype) != lay.dtype:
        raise CacheMismatch(f"KV cache layout is {lay.dtype}, the model runs in {tensors.dtype_name(dtype)}; refusing to restore")
    if config is not None:
        layers, heads, head_dim = _expected_shapes(config)
        shapes = set(lay.k_shapes) | set(lay.v_shapes)
        if lay.layers != layers or shapes != {(1, heads, head_dim)}:
            raise CacheMismatch(f"KV cache layout '{lay.tag()}' does not fit a model of {layers} layers, "
                                f"{heads} KV heads of dim {head_dim}; refusing to restore")


def read_layers(repo, table: PageTable, device=None, n_tokens: int | None = None) -> tensors.KV:
    """The first ``n_tokens`` (all by default) of ``table`` read from the side store,
    verified, in fresh tensors; only the pages that hold them are read.

    The buffer that becomes the K/V tensors (``tensors.Canvas``) is mapped
    in first, then pages are read, decoded, checked and copied into place, all
    on the page threads (every step releases the GIL; a thread waiting on its read leaves
    the cores to the others)."""
    store = repo.store
    n = len(table.tokens) if n_tokens is None else n_tokens
    wanted = [(span, page) for span, page in zip(table.spans(), table.pages) if span[0] < n]
    store.ensure(list(dict.fromkeys(page.sha256 for _, page in wanted)))  # one batch for a lazy fetch
    canvas = tensors.Canvas(table.layout, n)
    itemsize, in_planes = DTYPES[table.layout.dtype], table.encoding == BYTE_PLANES

    def job(items) -> None:
        for (a, b), page in items:
            # checked: the frame's declared size against the table before it is decoded, then
            # the frame's checksum, or a sha256 of the bytes
            data = store.get(page.sha256, size=page.size)
            canvas.fill(a, b, planes.decode(data, itemsize) if in_planes else data)

    pool = threads.pool()
    list(pool.map(canvas.map_in, canvas.parts()))
    list(pool.map(job, batches(wanted)))
    return canvas.layers(device)


def restore_layers(image_or_rev, *, repo=None, model, adapter: str | None = None, config=None, dtype=None,
                   device=None, tokens=None) -> tuple[tensors.KV, list[int]]:
    """Like ``restore`` but returns the per-layer (K, V) tensors instead of a DynamicCache."""
    repo, table = load_table(image_or_rev, repo)
    check(table, model, adapter, config, dtype)
    n = len(table.tokens) if tokens is None else common_prefix(table.tokens, token_list(tokens))
    return read_layers(repo, table, device, n), list(table.tokens[:n])


def restore(image_or_rev, *, repo=None, model, adapter: str | None = None, config=None, dtype=None,
            device=None, tokens=None):
    """The KV cache of an image as a transformers ``DynamicCache``, and its token ids.

    ``model`` is the fingerprint string or the torch module that will use the
    cache (a module also gives the config and dtype to check the layout
    against); ``adapter`` must name the adapter recorded at capture (None for
    none). With ``tokens`` (the context about to be run), only the longest
    prefix of them that the image's cache holds is restored, and only the
    pages holding it are read: the caller runs the rest of ``tokens`` on it
    (the token ids returned are that prefix; none in common gives an empty
    cache). Raises ``CacheMismatch`` on any difference, ``CorruptObject`` on a
    page whose bytes do not hash to the recorded value."""
    layers, ids = restore_layers(image_or_rev, repo=repo, model=model, adapter=adapter, config=config,
                                 dtype=dtype, device=device, tokens=tokens)
    return tensors.to_dynamic_cache(layers), ids
