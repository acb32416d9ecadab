"""Parameter values of the ``git pf`` commands, converted without pydantic.

Typer 0.2x converts every parameter value through a pydantic ``TypeAdapter``:
importing pydantic and building one adapter per parameter costs 50-70 ms on
every call, more than most commands take (docs/benchmarks.md). git-pf's
parameters are ``str``, ``bool``, ``int``, ``float``, ``Path`` and lists of ``str``:
``install`` converts those here when the result is certain (the same value
Typer would give), and hands every other case (a number that does not parse
or is out of bounds, a path check that fails, any other annotation) to
Typer's own conversion, so its checks and messages stay exactly as they are.
On a Typer without this machinery (older ones use click's types) it does
nothing. It may not change what a command receives.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, List

_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_TYPER = object()  # "let Typer decide"
_SCALARS = (str, bool, int, float, Path)


def install() -> None:
    try:
        from typer import _coercion, core
    except ImportError:  # pragma: no cover - a Typer without pydantic coercion
        return
    cls = getattr(core, "_TyperParameter", None)
    base = getattr(_coercion, "RuntimeParam", None)
    build = getattr(_coercion, "build_runtime_param", None)
    if cls is None or base is None or build is None or not hasattr(cls, "get_runtime_param"):
        return

    @dataclass(frozen=True)
    class Plain(base):  # type: ignore[misc, valid-type]
        descriptor: Any

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            got = _convert(self.annotation, self.parameter_info, value)
            if got is _TYPER:
                return build(self.descriptor)._coerce_value(value, param=param, ctx=ctx)
            return got

    def get_runtime_param(self):
        if self._runtime_param is None:
            d = self.type_descriptor
            plain = (d.file_annotation is None and getattr(d.parameter_info, "parser", None) is None
                     and (d.annotation in _SCALARS or d.annotation == List[str]))
            self._runtime_param = (Plain(parameter_info=d.parameter_info, annotation=d.annotation, descriptor=d)
                                   if plain else build(d))
        return self._runtime_param

    cls.get_runtime_param = get_runtime_param


def _convert(annotation: Any, info: Any, value: Any) -> Any:
    """``value`` as Typer would convert it, or ``_TYPER`` when that is not certain."""
    if annotation is bool:
        return value if isinstance(value, bool) else _TYPER
    if annotation == List[str]:
        if isinstance(value, (list, tuple)) and all(_text(v) for v in value):
            return list(value)
        return _TYPER
    if annotation is int:
        n = int(value) if _text(value) and _INT.fullmatch(value) else value if type(value) is int else None
        if n is None or info.clamp or (info.min is not None and n < info.min) or (info.max is not None and n > info.max):
            return _TYPER
        return n
    if annotation is float:
        if info.clamp or info.min is not None or info.max is not None:
            return _TYPER
        if _text(value) and _FLOAT.fullmatch(value):
            return float(value)
        return float(value) if type(value) in (int, float) else _TYPER
    if not _text(value):
        return _TYPER
    if annotation is str:
        return value
    return _path(info, value)


def _text(value: Any) -> bool:
    """A str that Typer takes as it is (one that encodes as UTF-8)."""
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _path(info: Any, value: str) -> Any:
    """A ``Path`` option with none of Typer's path checks but ``readable`` (its default)."""
    checks = (info.path_type, info.resolve_path, info.allow_dash, info.exists, info.writable)
    if not value or any(checks) or not (info.file_okay and info.dir_okay):
        return _TYPER
    try:
        os.stat(value)  # as Typer does: an existing path must be readable
    except OSError:
        return Path(value)
    if info.readable and not os.access(value, os.R_OK):
        return _TYPER
    return Path(value)
