"""Rows of a local JSONL, JSON, CSV or parquet file, every cell as the text written in the file.

Answers are compared as text, so loading must not change them: a CSV answer ``007``
stays ``007`` (not the float ``7.0``), the strings ``None``, ``NA`` and ``null`` stay
strings (not missing values), a JSON integer ``4`` stays ``4`` (not ``4.0``) and a JSON
number keeps the digits it was written with (``0.10``, ``1e3``, a 30-digit integer).
That is why the text formats are read with Python's own ``csv`` and ``json`` readers
instead of a dataframe library, which infers column types (and turns ``4`` into ``4.0``
as soon as one cell of the column is ``4.5`` or empty). Parquet cells are typed by the
file; numbers become their plain text (``4.0`` -> ``4``, ``0.1`` -> ``0.1``, never
``0.1000000000000000055``).

Top-level cells become ``str`` (booleans ``true``/``false``); a JSON ``null``, a parquet null
or NaN, and a CSV row that stops before the column become ``None`` (missing). Nested values
(lists, objects) keep their structure. Any problem with the file is one ``RLVRError`` line
that names the file and, where there is one, the line or row.
"""

from __future__ import annotations

import csv
import io
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from ..core.errors import RLVRError

FORMATS = (".jsonl", ".json", ".csv", ".parquet")


class _JsonFloat(float):
    """A JSON number with a fraction or exponent that remembers how it was written."""

    text: str

    def __new__(cls, text: str) -> _JsonFloat:
        value = super().__new__(cls, text)
        value.text = text
        return value


class _JsonInt(int):
    """A JSON integer that remembers how it was written (``-0`` stays ``-0``)."""

    text: str

    def __new__(cls, text: str) -> _JsonInt:
        value = super().__new__(cls, text)
        value.text = text
        return value


def _json_loads(text: str) -> Any:
    return json.loads(text, parse_float=_JsonFloat, parse_int=_JsonInt, parse_constant=_JsonFloat)


def _plain(value: Any) -> Any:
    """Nested JSON values back to plain ``int`` / ``float`` (only top-level cells become text)."""
    if isinstance(value, _JsonInt):
        return int(value)
    if isinstance(value, _JsonFloat):
        return float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _kind(value: Any) -> str:
    """A JSON value's type in JSON's own words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    kinds = {dict: "object", list: "array", str: "string", int: "number", float: "number"}
    return next(name for t, name in kinds.items() if isinstance(value, t))


def cell_text(value: Any) -> Any:
    """A top-level cell as text (see the module); ``None`` for a missing value, nested values as they are."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, (_JsonInt, _JsonFloat)):
        return value.text
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return None
        if value.is_integer() and abs(value) < 2**53:
            return str(int(value))
        return repr(value)  # the shortest text that reads back as the same float
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, (list, dict)):
        return _plain(value)
    return value if isinstance(value, (bytes, tuple)) else str(value)


def _decode(path: str, data: bytes) -> str:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[: err.start].count(b"\n") + 1
        raise RLVRError(
            f"{path}: not UTF-8 text (byte 0x{data[err.start]:02x} on line {line}); save the file as UTF-8"
        ) from None
    if not text.strip():
        raise RLVRError(f"{path}: the file is {'empty' if not text else 'only whitespace'}; it has no rows")
    return text


def _object_rows(path: str, items: list, where: str) -> list[dict]:
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise RLVRError(
                f"{path}: {where.format(i=i)} is a JSON {_kind(item)}, expected an object of fields"
            )
    return items


def _read_jsonl(path: str, text: str) -> list[dict]:
    rows = []
    for n, line in enumerate(text.split("\n"), start=1):  # not splitlines: U+2028 may sit inside a string
        if not line.strip():
            continue
        try:
            rows.append(_json_loads(line))
        except json.JSONDecodeError as err:
            raise RLVRError(f"{path}: line {n} is not valid JSON (column {err.colno}: {err.msg})") from None
        _object_rows(path, rows[-1:], f"line {n}")
    return rows


def _read_json(path: str, text: str) -> list[dict]:
    try:
        data = _json_loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data":  # one object per line in a .json file: read it as JSON lines
            return _read_jsonl(path, text)
        raise RLVRError(
            f"{path}: not valid JSON at line {err.lineno} (column {err.colno}: {err.msg})"
        ) from None
    if isinstance(data, list):
        return _object_rows(path, data, "row {i}")
    if isinstance(data, dict):
        columns = list(data.values())
        if columns and all(isinstance(c, list) for c in columns) and len({len(c) for c in columns}) == 1:
            return [dict(zip(data, cells)) for cells in zip(*columns)]  # {"question": [...], "answer": [...]}
        return [data]  # one row object (a one-line JSON lines file)
    raise RLVRError(
        f"{path}: the top level is a JSON {_kind(data)}; expected a list of row objects "
        "(or an object of equal-length column lists)"
    )


def _read_csv(path: str, text: str) -> list[dict]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        lines = list(reader)
    except csv.Error as err:
        raise RLVRError(f"{path}: not valid CSV near line {reader.line_num} ({err})") from None
    header, *body = [cells for cells in lines if cells]
    rows = []
    for i, cells in enumerate(body):
        if len(cells) > len(header):
            raise RLVRError(f"{path}: row {i} has {len(cells)} cells but the header has {len(header)}")
        rows.append(dict(zip(header, cells + [None] * (len(header) - len(cells)))))
    return rows


def _read_parquet(path: str) -> list[dict]:
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except Exception as err:  # noqa: BLE001 - any reader failure is a data error naming the file
        raise RLVRError(f"{path}: could not be read as parquet ({type(err).__name__}: {err})") from None


def read_rows(path: str) -> list[dict]:
    """Every row of a local file as ``{column: text}`` (see the module); errors name the file."""
    file = Path(path)
    if file.is_dir():
        raise RLVRError(f"{path}: is a directory; give a data file ({', '.join(FORMATS)})")
    if not file.is_file():
        raise RLVRError(f"data file not found: {path}")
    suffix = file.suffix.lower()
    if suffix not in FORMATS:
        raise RLVRError(f"{path}: unsupported extension {file.suffix!r}; use one of {', '.join(FORMATS)}")
    if suffix == ".parquet":
        rows = _read_parquet(path)
    else:
        try:
            data = file.read_bytes()
        except OSError as err:
            raise RLVRError(f"{path}: could not be read ({err.strerror})") from None
        text = _decode(path, data)
        rows = {".jsonl": _read_jsonl, ".json": _read_json, ".csv": _read_csv}[suffix](path, text)
    if not rows:
        raise RLVRError(f"{path}: no rows")
    return [{str(k): cell_text(v) for k, v in row.items()} for row in rows]
