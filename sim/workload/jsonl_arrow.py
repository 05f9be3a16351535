"""A fast path for JSON-lines traces: Arrow's C++ reader, a chunk of lines at a time.

Python's ``json.loads`` takes about 4 us a line, so a trace of 20 million lines took
minutes (and gigabytes of Python floats) before it was refused as too long. This reader
parses whole chunks in C++ and keeps columns, not objects. It gives exactly what the
line-by-line reader of :mod:`sim.workload.trace_formats` gives, or declines (``None``)
and leaves the file to that reader, which names the line and field at fault: it
declines on anything it cannot prove it reads alike (a blank line, two objects on a
line, a lone carriage return, text that is not UTF-8, a missing, null, non-finite,
non-numeric or repeated field, a negative or non-integer block id).
"""
from __future__ import annotations

import pathlib

import numpy as np

from sim.workload.trace import WorkloadDataError, open_data

CHUNK_BYTES = 8 << 20


class _Declined(Exception):
    """The chunk holds something only the line-by-line reader reads exactly."""


def read_jsonl_arrow(path: pathlib.Path, fields: tuple[str, ...], horizon: float,
                     max_rows: int, too_many: str, ids_field: str | None
                     ) -> tuple[dict[str, np.ndarray], np.ndarray, list | None] | None:
    """``read_jsonl_fields``' result for ``path``, or None where it must read it itself."""
    import pyarrow as pa
    import pyarrow.json as pj

    names = [*fields, *([ids_field] if ids_field else [])]
    types = [pa.float64()] * len(fields) + ([pa.list_(pa.int64())] if ids_field else [])
    options = pj.ParseOptions(explicit_schema=pa.schema(list(zip(names, types))),
                              unexpected_field_behavior="ignore")
    columns: dict[str, list[np.ndarray]] = {f: [] for f in fields}
    ids: list[tuple] | None = [] if ids_field else None
    rows = 0
    try:
        for chunk in _chunks(path):
            table = pj.read_json(pa.BufferReader(chunk), parse_options=options)
            if table.num_rows != chunk.count(b"\n"):     # a blank line, two on a line
                return None
            values = {f: _numbers(table.column(f)) for f in fields}
            past = np.flatnonzero(values[fields[0]] >= horizon)
            take = int(past[0]) + 1 if len(past) else table.num_rows
            if rows + take > max_rows:     # the line-by-line reader stops at this line
                if not _finite(values, max_rows - rows):
                    return None
                if ids is not None:        # (having checked the ids before it)
                    _block_ids(table.column(ids_field).slice(0, max_rows - rows), chunk)
                raise WorkloadDataError(path, too_many, line=max_rows + 1)
            if not _finite(values, take):
                return None
            for f in fields:
                columns[f].append(values[f][:take])
            if ids is not None:
                ids.extend(_block_ids(table.column(ids_field).slice(0, take), chunk))
            rows += take
            if len(past):
                break
    except (pa.ArrowInvalid, _Declined, UnicodeDecodeError):
        return None
    out = {f: np.concatenate(c) if c else np.empty(0, dtype=np.float64)
           for f, c in columns.items()}
    return out, np.arange(1, rows + 1, dtype=np.int64), ids


def _chunks(path: pathlib.Path):
    """The file's bytes in chunks of whole lines (each ending in a newline), checked to be
    UTF-8 without a carriage return that is not before a newline; a byte-order mark at the
    start is dropped (as the line-by-line reader drops it)."""
    tail = b""
    first = True
    with open_data(path) as fh:
        while True:
            block = fh.read(CHUNK_BYTES)
            data = tail + block
            if not block:
                if data:
                    yield _checked(data + b"\n", first)
                return
            cut = data.rfind(b"\n") + 1
            tail = data[cut:]
            if cut:
                yield _checked(data[:cut], first)
                first = False


def _checked(chunk: bytes, first: bool) -> bytes:
    if first and chunk.startswith(b"\xef\xbb\xbf"):
        chunk = chunk[3:]
    if chunk.count(b"\r") != chunk.count(b"\r\n"):
        raise _Declined
    chunk.decode("utf-8")           # raises UnicodeDecodeError on bytes that are not
    return chunk


def _numbers(column) -> np.ndarray:
    if column.null_count:
        raise _Declined             # missing or null: the line-by-line reader says which
    return column.to_numpy()


def _finite(values: dict[str, np.ndarray], upto: int) -> bool:
    return all(bool(np.isfinite(v[:upto]).all()) for v in values.values())


def _block_ids(column, chunk: bytes) -> list[tuple]:
    """Each row's ids as a tuple (empty where the row names none)."""
    if column.null_count and b"null" in chunk:   # an explicit null is an error, a
        raise _Declined                          # missing list is not
    if column.null_count == len(column):
        return [()] * len(column)
    flat = column.combine_chunks()
    values = flat.flatten().to_numpy(zero_copy_only=False)
    if len(values) and values.min() < 0:
        raise _Declined
    return [tuple(row) if row is not None else () for row in flat.to_pylist()]
