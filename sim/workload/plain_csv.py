"""A plain CSV of numbers read without pandas: the common case of a trace or length file
(an ASCII header, then rows of as many comma-separated numbers, no quotes, no blank
lines), read with the standard library in a fraction of pandas' import alone.

:func:`read_plain_columns` answers only what the pandas reader
(:func:`sim.workload.trace.read_csv_columns`) would answer with the same numbers (Python's
``float`` and pandas' ``to_numeric`` both round a decimal correctly: the same bits), and
``None`` for anything else (a quote, a blank line, a row of another width, a value that
is not a finite number, a file past one chunk), which the pandas reader then reads and,
where the file is at fault, reports with its line: every error stays that reader's.
"""
from __future__ import annotations

import pathlib
from collections.abc import Callable

import numpy as np

# At most this many bytes of text (and rows: one chunk of the pandas reader) are read here
MAX_PLAIN_BYTES = 64 * 2**20
MAX_PLAIN_ROWS = 1_000_000


def read_plain_columns(path: pathlib.Path, columns: tuple[str, ...],
                       open_data: Callable, max_rows: int,
                       enough: Callable[[dict[str, np.ndarray]], int | None] | None = None
                       ) -> tuple[dict[str, np.ndarray], np.ndarray] | None:
    """The named columns as float64 arrays and each row's 1-based line (the header is
    line 1), or None where the file is not plain (see the module's docstring). ``enough``
    and ``max_rows`` as :func:`~sim.workload.trace.read_csv_columns` takes them; more than
    ``max_rows`` rows wanted is None too (that reader says so)."""
    with open_data(path) as fh:
        data = fh.read(MAX_PLAIN_BYTES + 1)
    if len(data) > MAX_PLAIN_BYTES or not data.isascii() or b'"' in data:
        return None
    data = data.replace(b"\r\n", b"\n")
    head, _, body = data.partition(b"\n")
    if b"\r" in data or b"_" in body:          # float() reads '1_000', pandas does not
        return None
    if body and not body.endswith(b"\n"):
        body += b"\n"
    header = [name.strip() for name in head.decode("ascii").split(",")]
    if any(header.count(name) != 1 for name in columns):
        return None
    width, num_rows = len(header), body.count(b"\n")
    if not 0 < num_rows <= MAX_PLAIN_ROWS or body.count(b",") != num_rows * (width - 1):
        return None
    raw = np.frombuffer(body, dtype=np.uint8)   # every row as wide as the header
    commas = np.searchsorted(np.flatnonzero(raw == 44), np.flatnonzero(raw == 10))
    if (np.diff(commas, prepend=0) != width - 1).any():
        return None
    cells = body[:-1].decode("ascii").replace("\n", ",").split(",")
    try:
        values = {name: np.array(cells[header.index(name)::width], dtype=np.float64)
                  for name in columns}
    except ValueError:          # not a number (or a blank line): the pandas reader's to say
        return None
    lines = np.arange(2, num_rows + 2, dtype=np.int64)
    last = enough({columns[0]: values[columns[0]]}) if enough is not None else None
    if last is not None:        # the rows after it are neither wanted nor checked
        values = {name: v[:last] for name, v in values.items()}
        lines = lines[:last]
    if len(lines) > max_rows:
        return None
    if not all(np.isfinite(v).all() for v in values.values()):
        return None             # 'inf', 'nan', '1e999': the pandas reader's to say
    return values, lines
