"""Column chunks of a packed tape (tape layout 3; docs/format.md §8.1, "Column chunks").

A chunk's entries (canonical JSON objects, one per line) are stored as columns, so that the
values of one field sit together and zstd sees one clock after another, one request body after
another, instead of every field of one entry before the next entry's: each entry's shape (the
entry with every string, integer and float replaced by 0, 1 or 2), one a line, then one column
per field path and value type, its values in entry order (an integer column as each value's
difference from the one before it). ``encode`` gives that payload, or None when the entries do
not come back from it byte for byte (the writer then stores the chunk as plain content);
``decode`` gives the entries' bytes back from an untrusted payload, refusing one whose output
would pass a bound before it is built. It writes each entry from its shape's canonical text with
the values put in (a shape seen before is not read again), as ``canonjson`` would. Pure
computation on bytes: no git, no compression.
"""
from __future__ import annotations

import json
import re
from json.encoder import encode_basestring

from ...core import canonjson
from ...core.errors import DataError

MAGIC = b'["pf-tape-columns",3]\n'
_STR, _INT, _FLOAT = 0, 1, 2
_SUFFIX = {str: "#s", int: "#i", float: "#f"}
_CODE = {str: _STR, int: _INT, float: _FLOAT}
_TYPE = {"#s": str, "#i": int, "#f": float}
_KEYS = ("#s", "#i", "#f")
_TEXT = (encode_basestring, int.__repr__, float.__repr__)  # a value as canonjson writes it (not ASCII-escaped)
_HOLE = re.compile(r'"(?:[^"\\]|\\.)*"|[012]')  # in a shape's canonical text: a key, or where a value goes


def encode(entries: list[bytes]) -> bytes | None:
    """The column payload of ``entries`` (newline-ended JSON objects), or None when one of them is
    not canonical JSON (only canonical entries come back from columns byte for byte)."""
    columns: dict[str, list] = {}
    shapes = []
    try:
        for data in entries:
            obj = json.loads(data)
            if type(obj) is not dict or canonjson.encode(obj) != data:
                return None
            shapes.append(_split(obj, "", columns))
        for key in columns:
            if key.endswith("#i"):
                columns[key] = _differences(columns[key])
        return (MAGIC + b"".join(canonjson.encode(shape) for shape in shapes)
                + b"".join(canonjson.encode([k, columns[k]]) for k in sorted(columns)))
    except (ValueError, RecursionError):
        return None


def _split(value, path: str, columns: dict[str, list]):
    """The shape of ``value`` (a dict or list); each string, integer and float in it goes to its column."""
    pairs = value.items() if type(value) is dict else ((None, v) for v in value)
    out = {} if type(value) is dict else []
    for k, v in pairs:
        where = path + "." + k if k is not None else path + "[]"
        kind = type(v)
        if kind in _CODE:
            columns.setdefault(where + _SUFFIX[kind], []).append(v)
            v = _CODE[kind]
        elif kind is dict or kind is list:
            v = _split(v, where, columns)
        if k is None:
            out.append(v)
        else:
            out[k] = v
    return out


def _differences(values: list[int]) -> list[int]:
    out, before = [], 0
    for v in values:
        out.append(v - before)
        before = v
    return out


def decode(payload: bytes, count: int, limit: int) -> bytes:
    """The ``count`` entries' bytes a column payload holds; a DataError (without a location) when
    it is not a well-formed payload of ``count`` entries, or when its entries would be over
    ``limit`` bytes (found before they are built)."""
    if not payload.startswith(MAGIC):
        raise DataError("its payload does not start with the column header")
    lines = payload[len(MAGIC):].split(b"\n")
    if len(lines) <= count or lines[-1]:
        raise DataError(f"its payload must be newline-ended lines: {count} shapes, then columns")
    values, before, size = {}, "", 0  # size: at least what the integers will take
    for line in lines[count:-1]:
        try:  # a duplicate key can only make entries whose hash is not the chunk's name's
            column = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # UnicodeDecodeError included
            raise DataError("its payload holds a column that is not JSON") from None
        if (type(column) is not list or len(column) != 2 or type(column[0]) is not str
                or type(column[1]) is not list or column[0][-2:] not in _TYPE or column[0] <= before):
            raise DataError("its payload holds a malformed column")
        key, items = column
        before = key
        kind = _TYPE[key[-2:]]
        if not set(map(type, items)) <= {kind}:
            raise DataError(f"its column {key[:80]} holds a value of another type")
        if kind is int:  # strings and floats are no larger written than read; a sum can be
            items, width = _sums(items, limit - size)
            size += width
        values[key] = iter(items)
    out, size, plans = [], 0, {}
    for line in lines[:count]:
        plan = plans.get(line)
        if plan is None:  # each hole's column and how to write its value, once a shape
            holes, pieces = _plan(line)
            plan = plans[line] = ([(values.get(key, _NONE), _TEXT[code]) for key, code in holes], pieces)
        takes, pieces = plan
        try:
            texts = [write(next(column)) for column, write in takes]
        except StopIteration:
            raise DataError("its shapes take more values than a column holds") from None
        except ValueError:  # an integer past Python's digit limit
            raise DataError("its payload holds an integer too long to write") from None
        pieces = list(pieces)
        pieces[1::2] = texts
        text = "".join(pieces)
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate: canonjson escapes the whole entry
            data = canonjson.encode(json.loads(text))
        size += len(data)
        if size > limit:
            raise DataError(f"its entries would be over {limit} bytes")
        out.append(data)
    if any(next(it, _END) is not _END for it in values.values()):
        raise DataError("its payload holds values no entry takes")
    return b"".join(out)


def _no_constant(name: str):
    raise ValueError(name)


def _plan(line: bytes) -> tuple[list[tuple[str, int]], list[str]]:
    """A shape line's holes (column key and value type, in canonical order) and the pieces of
    its canonical text around them (newline-ended, a None where each value goes)."""
    try:
        shape = json.loads(line)
    except (ValueError, RecursionError):
        raise DataError("its payload holds a shape that is not JSON") from None
    if type(shape) is not dict:
        raise DataError("its payload must hold the shape of an object on each of its first lines")
    holes: list[tuple[str, int]] = []
    try:
        _holes(shape, "", holes)
        text = canonjson.dumps(shape)
    except RecursionError:
        raise DataError("its payload holds a shape nested too deeply") from None
    pieces, last = [], 0
    for m in _HOLE.finditer(text):
        if m.group()[0] != '"':
            pieces += [text[last:m.start()], None]
            last = m.end()
    pieces.append(text[last:] + "\n")
    if len(pieces) != 2 * len(holes) + 1:
        raise DataError("its payload holds a malformed shape")
    return holes, pieces


def _holes(shape, path: str, holes: list) -> None:
    """Each value's column key and type code in ``shape`` (a dict or list), in canonical order."""
    pairs = sorted(shape.items()) if type(shape) is dict else ((None, v) for v in shape)
    for k, v in pairs:
        where = path + "." + k if k is not None else path + "[]"
        kind = type(v)
        if kind is int and 0 <= v <= 2:
            holes.append((where + _KEYS[v], v))
        elif kind is dict or kind is list:
            _holes(v, where, holes)
        elif not (v is None or v is True or v is False):
            raise DataError("its payload holds a malformed shape")


_END = object()
_NONE = iter(())


def _sums(differences: list[int], limit: int) -> tuple[list[int], int]:
    """An integer column's values from its differences, and a lower bound of the bytes they take
    written; a DataError as soon as that passes ``limit`` (a small difference can add to a large
    value, so a short payload could otherwise build a huge one)."""
    out, value, width = [], 0, 0
    for d in differences:
        value += d
        width += max(value.bit_length() - 1, 0) * 3 // 10 + 2  # no more than it takes written: digits, a separator
        if width > limit:
            raise DataError(f"its entries would be over {limit} bytes")
        out.append(value)
    return out, width
