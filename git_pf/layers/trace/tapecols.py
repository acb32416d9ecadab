"""Column chunks of a packed tape (tape layouts 3 and 4; docs/format.md §8.1, "Column chunks").

A chunk's entries (canonical JSON objects, one per line) are stored as columns, so that the
values of one field sit together and zstd sees one clock after another, one request body after
another, instead of every field of one entry before the next entry's: each entry's shape (the
entry with every string, integer and float replaced by 0, 1 or 2), one a line, then one column
per field path and value type, its values in entry order (an integer column as each value's
difference from the one before it). Layout 4 adds two rules: in an object with a string ``fn``
and a ``v`` (a draw), ``fn`` stays in the shape and ``v`` goes to a column of that function's
own (``.draws[].v@time.time#f``), and a float column whose values written as the differences of
their IEEE 754 bits is shorter is stored so (``#d``: a clock's ticks, not its digits).
``encode`` gives the layout 4 payload, or None when the entries do not come back from it byte for
byte (the writer then stores the chunk as plain content); ``decode`` gives the entries' bytes back
from an untrusted payload of either layout, refusing one whose output would pass a bound before
it is built. It writes each entry from its shape's canonical text with the values put in (a shape
seen before is not read again), as ``canonjson`` would. Pure computation on bytes: no git, no
compression.
"""
from __future__ import annotations

import json
import re
import struct
from json.encoder import encode_basestring

from ...core import canonjson
from ...core.errors import DataError

MAGIC = b'["pf-tape-columns",4]\n'
MAGICS = {b'["pf-tape-columns",3]\n': 3, MAGIC: 4}  # the layouts a reader takes
_STR, _INT, _FLOAT = 0, 1, 2
_SUFFIX = {str: "#s", int: "#i", float: "#f"}
_CODE = {str: _STR, int: _INT, float: _FLOAT}
_TYPE = {"#s": str, "#i": int, "#f": float}
_KEYS = ("#s", "#i", "#f")
_TEXT = (encode_basestring, int.__repr__, float.__repr__)  # a value as canonjson writes it (not ASCII-escaped)
_HOLE = re.compile(r'"(?:[^"\\]|\\.)*"|[012]')  # in a shape's canonical text: a key, or where a value goes


def encode(entries: list[bytes], layout: int = 4) -> bytes | None:
    """The column payload of ``entries`` (newline-ended JSON objects), or None when one of them is
    not canonical JSON (only canonical entries come back from columns byte for byte). Writers
    use layout 4; ``layout=3`` gives the payload tape layout 3 wrote (a reader still takes it)."""
    columns: dict[str, list] = {}
    shapes = []
    try:
        for data in entries:
            obj = json.loads(data)
            if type(obj) is not dict or canonjson.encode(obj) != data:
                return None
            shapes.append(_split(obj, "", columns, layout >= 4))
        lines = {}
        for key, items in columns.items():
            if key.endswith("#i"):
                items = _differences(items)
            line = canonjson.encode([key, items])
            if key.endswith("#f") and layout >= 4:
                ticks = canonjson.encode([key[:-2] + "#d", _differences(list(map(_bits, items)))])
                if len(ticks) < len(line):
                    key, line = key[:-2] + "#d", ticks
            lines[key] = line
        head = next(m for m, n in MAGICS.items() if n == layout)
        return head + b"".join(canonjson.encode(shape) for shape in shapes) + b"".join(lines[k] for k in sorted(lines))
    except (ValueError, RecursionError):
        return None


def _bits(value: float) -> int:
    """A float's IEEE 754 double bits as a signed 64-bit integer (consecutive clock readings are close)."""
    return _INT64.unpack(_DOUBLE.pack(value))[0]


def _is_draw(value: dict) -> bool:
    """An object whose ``v`` goes to its ``fn``'s own column (layout 4): a draw."""
    return type(value.get("fn")) is str and "v" in value


def _split(value, path: str, columns: dict[str, list], draws: bool):
    """The shape of ``value`` (a dict or list); each string, integer and float in it goes to its
    column (``draws``: a draw's value to its function's own, layout 4)."""
    pairs = value.items() if type(value) is dict else ((None, v) for v in value)
    out = {} if type(value) is dict else []
    fn = value["fn"] if draws and type(value) is dict and _is_draw(value) else None
    for k, v in pairs:
        where = path + "." + k if k is not None else path + "[]"
        kind = type(v)
        if fn is not None and k in ("fn", "v"):
            if k == "fn":
                out[k] = v  # the function stays in the shape
                continue
            where += "@" + fn
        if kind in _CODE:
            columns.setdefault(where + _SUFFIX[kind], []).append(v)
            v = _CODE[kind]
        elif kind is dict or kind is list:
            v = _split(v, where, columns, draws)
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
    head = payload[:payload.find(b"\n") + 1]
    layout = MAGICS.get(head)
    if layout is None:
        raise DataError("its payload does not start with the column header")
    lines = payload[len(head):].split(b"\n")
    if len(lines) <= count or lines[-1]:
        raise DataError(f"its payload must be newline-ended lines: {count} shapes, then columns")
    values, before, size = {}, "", 0  # size: at least what the integers will take
    for line in lines[count:-1]:
        try:  # a duplicate key can only make entries whose hash is not the chunk's name's
            column = json.loads(line, parse_constant=_no_constant)
        except (ValueError, RecursionError):  # UnicodeDecodeError included
            raise DataError("its payload holds a column that is not JSON") from None
        if (type(column) is not list or len(column) != 2 or type(column[0]) is not str
                or type(column[1]) is not list or column[0][-2:] not in _TYPES[layout] or column[0] <= before):
            raise DataError("its payload holds a malformed column")
        key, items = column
        before = key
        kind = _TYPE[key[-2:]] if key[-2:] != "#d" else int
        if not set(map(type, items)) <= {kind}:
            raise DataError(f"its column {key[:80]} holds a value of another type")
        if key[-2:] == "#d":  # a float column as its bits' differences: each sum a finite double
            key, items = key[:-2] + "#f", _floats(items)
        elif kind is int:  # strings and floats are no larger written than read; a sum can be
            items, width = _sums(items, limit - size)
            size += width
        if key in values:  # one path's floats both as bits (#d, sorted first) and as digits
            raise DataError(f"its payload holds the floats of {key[:80]} twice")
        values[key] = iter(items)
    out, size, plans = [], 0, {}
    for line in lines[:count]:
        plan = plans.get(line)
        if plan is None:  # each hole's column and how to write its value, once a shape
            holes, pieces = _plan(line, layout)
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


def _plan(line: bytes, layout: int) -> tuple[list[tuple[str, int]], list[str]]:
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
        _holes(shape, "", holes, layout)
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


def _holes(shape, path: str, holes: list, layout: int) -> None:
    """Each value's column key and type code in ``shape`` (a dict or list), in canonical order."""
    pairs = sorted(shape.items()) if type(shape) is dict else ((None, v) for v in shape)
    fn = shape["fn"] if layout >= 4 and type(shape) is dict and _is_draw(shape) else None
    for k, v in pairs:
        where = path + "." + k if k is not None else path + "[]"
        kind = type(v)
        if fn is not None and k in ("fn", "v"):
            if k == "fn":
                continue  # a draw's function, in the shape itself
            where += "@" + fn
        if kind is int and 0 <= v <= 2:
            holes.append((where + _KEYS[v], v))
        elif kind is dict or kind is list:
            _holes(v, where, holes, layout)
        elif not (v is None or v is True or v is False):
            raise DataError("its payload holds a malformed shape")


_END = object()
_NONE = iter(())
_TYPES = {3: _KEYS, 4: _KEYS + ("#d",)}  # the column types of each layout
_DOUBLE, _INT64 = struct.Struct("<d"), struct.Struct("<q")
_EXPONENT = 0x7FF0000000000000  # all ones in a double's exponent: an infinity or NaN, never JSON


def _floats(differences: list[int]) -> list[float]:
    """A ``#d`` column's floats from its bits' differences; a DataError at the first sum that is not
    a finite double's bits (so no sum grows past 64 bits)."""
    out, value = [], 0
    for d in differences:
        value += d
        if not -(1 << 63) <= value < 1 << 63 or value & _EXPONENT == _EXPONENT:
            raise DataError("its payload holds a float column whose bits are not a finite double's")
        out.append(_DOUBLE.unpack(_INT64.pack(value))[0])
    return out


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
