"""``StrictSerializer``: the serializer ``PfSaver`` decodes checkpoints with unless it is given another.

A checkpoint fetched from a remote is untrusted data, and LangGraph's msgpack
format can name any importable callable (``Ext(0, ["os", "system", ...])``),
which LangGraph's default serializer calls on load. This serializer decodes
plain data, LangGraph's strict allow-list (``SAFE_MSGPACK_TYPES``: dates,
UUIDs, LangChain messages and documents, ``Send``, ``Command``, ``Interrupt``
...) and the types its user registers. Before LangGraph decodes a msgpack
value, every extension in it (nested ones included) is checked against that
list, and one that is not on it raises ``Refused`` naming it: nothing is
imported or called, and no value comes back half-decoded. Pickle and unknown
value types are refused as well. Pure: no I/O.
"""
from __future__ import annotations

from collections.abc import Iterable
from inspect import isclass

import ormsgpack
from langgraph.checkpoint.serde import _msgpack as lg_msgpack
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

# LangGraph's msgpack extension codes (langgraph.checkpoint.serde.jsonplus).
_CONSTRUCTORS = frozenset({0, 1, 2, 4, 5})  # [module, name, args...]: a callable is imported and called
_METHOD = 3  # [module, name, arg, method]
_DELTA = 7  # a nested msgpack value
_TYPES = frozenset({"null", "bytes", "bytearray", "json", "msgpack"})


class Refused(Exception):
    """A stored value names something the serializer does not decode (``what`` says which)."""

    def __init__(self, what: str):
        super().__init__(what)
        self.what = what


def type_keys(types: Iterable) -> frozenset[tuple[str, str]]:
    """``(module, name)`` of each class or pair in ``types``; ValueError for anything else."""
    keys = set()
    for t in types:
        if isclass(t):
            keys.add((t.__module__, t.__name__))
        elif isinstance(t, tuple) and len(t) == 2 and all(isinstance(p, str) and p for p in t):
            keys.add(t)
        else:
            raise ValueError(f"a type to allow is a class or a (module, name) pair, not {t!r}")
    return frozenset(keys)


class StrictSerializer(JsonPlusSerializer):
    """LangGraph's ``JsonPlusSerializer`` in strict mode, plus ``allowed`` (classes or
    ``(module, name)`` pairs), whatever ``LANGGRAPH_STRICT_MSGPACK`` says; a refused value
    raises ``Refused`` instead of LangGraph's warning."""

    def __init__(self, allowed: Iterable = ()):
        self.allowed = type_keys(allowed)
        super().__init__(allowed_msgpack_modules=tuple(self.allowed) or None)

    def with_msgpack_allowlist(self, extra_allowlist) -> StrictSerializer:
        """What LangGraph calls when it compiles a graph under ``LANGGRAPH_STRICT_MSGPACK``: the
        graph's state types join the list."""
        merged = self.allowed | type_keys(extra_allowlist)
        return self if merged == self.allowed else StrictSerializer(merged)

    def loads_typed(self, data: tuple[str, bytes]):
        kind, raw = data
        if kind not in _TYPES:
            raise Refused(f"values of type {kind!r}")
        if kind == "msgpack":
            self._check(raw)
        return super().loads_typed(data)

    def _check(self, raw: bytes) -> None:
        """Refused when an extension anywhere in ``raw`` is not on the list (nothing is built)."""
        refused: list[str] = []

        def hook(code: int, payload: bytes):
            try:
                if code == _DELTA:
                    return ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
                if code not in _CONSTRUCTORS and code != _METHOD:
                    return None  # numpy arrays and unknown codes build no object of a named type
                tup = ormsgpack.unpackb(payload, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
                if not isinstance(tup, list) or len(tup) < (4 if code == _METHOD else 3) \
                        or not all(isinstance(p, str) for p in tup[:2]):
                    raise Refused(f"a malformed msgpack extension (code {code})")
                if code == _METHOD:
                    key = (tup[0], tup[1], tup[3])
                    if key not in lg_msgpack.SAFE_MSGPACK_METHODS:
                        raise Refused(".".join(map(str, key)))
                elif (tup[0], tup[1]) not in lg_msgpack.SAFE_MSGPACK_TYPES and (tup[0], tup[1]) not in self.allowed:
                    raise Refused(f"{tup[0]}.{tup[1]}")
                return None
            except Refused as e:
                refused.append(e.what)
                raise
            except RecursionError:
                refused.append("msgpack extensions nested too deep")
                raise

        try:
            ormsgpack.unpackb(raw, ext_hook=hook, option=ormsgpack.OPT_NON_STR_KEYS)
        except (ValueError, TypeError, RecursionError) as e:
            if refused:
                raise Refused(refused[0]) from None
            raise Refused(f"malformed msgpack ({e})") from None
