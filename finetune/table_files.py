"""Rows of a user's task file: CSV (standard quoting), TSV (quoting on or off) or JSONL.

`read_rows(path, layout, columns, max_rows)` gives (line number, {field: cell}) for each data row,
the fields named by the task spec (`text`, `text_b`, `label`, `id`) and found by header name or by
index. Every fault is one InputError naming the file and line (and the column or field): bytes
that are not UTF-8, a column the header lacks (the header's columns are listed), a row with more
or fewer fields than the header (without a header: than the first row), a quote never closed, a
JSONL line that is not an object or lacks a field; `text_cell` refuses an empty text and JSON's
NaN. A JSONL value stays as parsed (a list stays a list); CSV and TSV cells are strings.
"""

import csv
import dataclasses
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from electra_tf.errors import InputError

FORMATS = ("csv", "tsv", "jsonl")
csv.field_size_limit(sys.maxsize)  # a long review is a row like any other (the default stops at 128 KB)
Column = Union[str, int]  # a header name, or a 0-based index (negative: from the row's end)


@dataclasses.dataclass(frozen=True)
class Layout:
    """How a file is written: its format, whether a TSV quotes, whether a CSV/TSV has a header."""

    format: str
    quoting: bool = False  # TSV only; CSV always quotes as the standard says
    header: bool = True  # CSV / TSV


def decoded_lines(path, source=None) -> Iterator[Tuple[int, str]]:
    """(1-based number, text) of each line of `path` (or of the binary stream `source`, named
    `path` in messages), read lazily as UTF-8 (a BOM dropped): bytes that are not UTF-8 are an
    error naming the line. The text keeps its line end."""
    try:
        stream = source if source is not None else open(path, "rb")
    except OSError as error:
        raise InputError(f"{path}: cannot read it ({error.strerror})") from None
    try:
        for number, raw in enumerate(stream, start=1):
            try:
                yield number, raw.decode("utf-8-sig" if number == 1 else "utf-8")
            except UnicodeDecodeError as error:
                raise InputError(f"{path}:{number}: bytes that are not UTF-8 ({raw[error.start:error.start + 4]!r}); "
                                 f"save the file as UTF-8") from None
    finally:
        if source is None:
            stream.close()


def read_text(path: Path) -> str:
    """The whole file as `decoded_lines` reads it."""
    return "".join(text for _, text in decoded_lines(path))


def _delimited(path: Path, lines: Iterator[Tuple[int, str]], layout: Layout, on_blank):
    """(first line, fields) of each record of a CSV or TSV; a blank line goes to `on_blank`."""
    dialect = dict(delimiter="," if layout.format == "csv" else "\t", strict=True)
    if layout.format == "tsv" and not layout.quoting:
        dialect["quoting"] = csv.QUOTE_NONE
    reader = csv.reader((text for _, text in lines), **dialect)
    start = 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as error:
            what = f"malformed {layout.format.upper()}"
            if "new-line character" in str(error):  # csv's own advice (universal-newline mode) does not apply
                raise InputError(f"{path}:{start}: {what}: a carriage return (\\r) inside an unquoted field") from None
            raise InputError(f"{path}:{start}: {what} ({error}): a quoted field that starts here is not closed, "
                             f"or text follows its closing quote") from None
        if row:
            yield start, row
        elif on_blank is not None:
            on_blank(start)
        start = reader.line_num + 1


def _index(columns: List[str], column: Column, path: Path, field: str, header: bool,
           optional: bool = False) -> Optional[int]:
    if isinstance(column, int):
        return column
    if not header:  # an optional column too: without a header its name could never be found
        raise InputError(f"{path}: {field} column {column!r} is a name, but the task says the file has no "
                         f"header: give its index")
    if optional and column not in columns:
        return None
    if column not in columns:
        raise InputError(f"{path}:1: no column {column!r} for the {field}; the header's columns are "
                         f"{', '.join(repr(c) for c in columns)}")
    if columns.count(column) > 1:
        raise InputError(f"{path}:1: the header names {column!r} ({field}) {columns.count(column)} times: give "
                         f"its index instead of its name")
    return columns.index(column)


def _delimited_rows(path: Path, lines, layout: Layout, columns: Dict[str, Column],
                    optional, on_blank) -> Iterator[Tuple[int, Dict[str, object]]]:
    records = _delimited(path, lines, layout, on_blank)
    header = next(records, None) if layout.header else None
    if layout.header and header is None:
        raise InputError(f"{path}: is empty (no header)")
    width = (len(header[1]), "the header has") if header else None
    where = {field: _index(header[1] if header else [], column, path, field, layout.header, field in optional)
             for field, column in columns.items()}
    where = {field: index for field, index in where.items() if index is not None}
    for line, row in records:
        if width is None:  # no header: every row as wide as the first (an unquoted delimiter shifts columns)
            width = (len(row), f"line {line} has")
        if len(row) != width[0]:
            raise InputError(f"{path}:{line}: {len(row)} fields, but {width[1]} {width[0]}")
        cells = {}
        for field, index in where.items():
            if not -len(row) <= index < len(row):
                if field in optional:  # e.g. a test file without the label column
                    continue
                raise InputError(f"{path}:{line}: {len(row)} fields, no column {index} for the {field}")
            cells[field] = row[index]
        yield line, cells


def _jsonl_rows(path: Path, lines, columns: Dict[str, Column], optional,
                on_blank) -> Iterator[Tuple[int, Dict[str, object]]]:
    for line, raw in lines:
        if not raw.strip():
            if on_blank is not None:
                on_blank(line)
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            raise InputError(f"{path}:{line}: not a JSON object ({error.msg})") from None
        except ValueError:  # an integer past Python's digit limit (sys.get_int_max_str_digits)
            raise InputError(f"{path}:{line}: not a JSON object (a number of over "
                             f"{sys.get_int_max_str_digits():,} digits)") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{line}: not a JSON object")
        cells = {}
        for field, key in columns.items():
            if key not in record and field in optional:
                continue
            if key not in record:
                raise InputError(f"{path}:{line}: no field {key!r} for the {field}; the line has "
                                 f"{', '.join(repr(k) for k in record)}")
            cells[field] = record[key]
        yield line, cells


def iter_rows(path, layout: Layout, columns: Dict[str, Column], optional: Sequence[str] = (),
              source=None, on_blank: Optional[Callable[[int], None]] = None) -> Iterator[Tuple[int, Dict[str, object]]]:
    """(1-based line, {field: cell}) of each data row of `path` (or of the binary stream `source`),
    lazily; a blank line is skipped, or given to `on_blank` (its number); a field in `optional`
    whose column the file lacks is left out of the rows instead of being an error."""
    lines = decoded_lines(path, source)
    if layout.format == "jsonl":
        return _jsonl_rows(Path(path), lines, columns, optional, on_blank)
    return _delimited_rows(Path(path), lines, layout, columns, optional, on_blank)


def read_rows(path, layout: Layout, columns: Dict[str, Column], max_rows: Optional[int] = None,
              optional: Sequence[str] = ()) -> List[Tuple[int, Dict[str, object]]]:
    """The rows of `iter_rows` as a list (`max_rows` at most); a file without rows is an error."""
    rows = list(itertools.islice(iter_rows(path, layout, columns, optional), max_rows))
    if not rows:
        raise InputError(f"{path}: holds no rows")
    return rows


def blank_text(value) -> bool:
    """A cell holding text of nothing but whitespace (what --skip-empty leaves out). Any other JSON
    value (a number, list, null, ...) prints as something, so it goes on to `text_cell` to take or refuse."""
    return not str(value).strip()


def non_finite(value) -> bool:
    """Whether a cell is JSON's NaN or Infinity (`json.loads` reads them as floats; pandas writes NaN
    for a missing value): a cell's value, not a type of ours, so tested as one."""
    return isinstance(value, float) and not math.isfinite(value)


RowId = Union[str, int, float, None]  # a row's id: text or a JSON number, as its file gave it


def id_cell(value, path: Path, line: int) -> RowId:
    """A row's id as its predictions carry it: text or a JSON number as it is; None for a blank
    or null cell (the row's position then stands in); anything else one error naming the line."""
    if value is None or blank_text(value):
        return None
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise InputError(f"{path}:{line}: the id {value!r} is {type(value).__name__}, not text or a number")
    if non_finite(value):  # no JSON to write back
        raise InputError(f"{path}:{line}: the id {value!r} is not a finite number")
    return value


def text_cell(value, path: Path, line: int, field: str) -> str:
    """A text cell: a non-empty string (JSON numbers are taken as their text, but not JSON's NaN or
    Infinity: what pandas writes for a missing value, which would become the text or label "nan")."""
    if non_finite(value):
        raise InputError(f"{path}:{line}: the {field} is {value!r}, not text (a missing value?)")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{path}:{line}: the {field} is empty" if isinstance(value, str) or value is None
                         else f"{path}:{line}: the {field} is {type(value).__name__}, not text")
    return value
