"""Trace files as fleetsim reads them: a CSV of any column layout (times in seconds,
milliseconds, microseconds or dates and times), the Azure LLM inference traces and the
Mooncake JSONL traces, gzip-compressed or not; each turned into one :class:`Trace`. Each
format's fields, unit and reader are its entry in :mod:`sim.config.trace_layouts`.

As for every data file, errors name the file, the line and the field, never a value.
"""
from __future__ import annotations

import io
import json
import math
import pathlib
from dataclasses import dataclass

import numpy as np

from sim.config.trace_layouts import TRACE_FORMATS
from sim.config.workload import TraceArrivalConfig
from sim.workload.jsonl_arrow import read_jsonl_arrow
from sim.workload.trace import (MAX_CSV_ROWS, WorkloadDataError, scan_text,
                                check_token_counts, open_data, read_csv_columns)

UNIT_S = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class Trace:
    """A validated trace: timestamps in seconds (>= 0, non-decreasing) and lengths."""

    timestamp_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    # a Mooncake trace's hash_ids: each row's ids of its prompt's blocks (a tuple, empty
    # where the row names none); None for formats without them
    block_ids: np.ndarray | None = None


MAX_TIMESTAMP_S = 10 * 365 * 86400.0     # the longest run a scenario may ask for


def load_trace(path: pathlib.Path, cfg: TraceArrivalConfig | None = None,
               horizon_s: float = math.inf, max_requests: int | None = None) -> Trace:
    """Read and check a trace in ``cfg``'s format (default: a CSV with columns
    ``timestamp`` in seconds, ``prompt_tokens``, ``output_tokens``). Rows timed past
    ``horizon_s`` (in the trace's own seconds) are not read, but for the first of them:
    a run that ends there needs none, and a long file costs no more than the run. Each
    row before it is a request: more than ``max_requests`` of them are refused as they
    are read (a file of millions of rows costs no memory before)."""
    layout = cfg.layout if cfg is not None else TRACE_FORMATS["csv"]
    names, unit = layout.fields, layout.timestamp_unit
    if layout.configurable and cfg is not None:     # the scenario's names and unit, if any
        cols = cfg.columns
        if cols is not None:
            names = (cols.timestamp, cols.prompt_tokens, cols.output_tokens)
        unit = cfg.timestamp_unit or unit
    limit = {}
    if max_requests is not None and max_requests + 1 < MAX_CSV_ROWS:
        limit = {"max_rows": max_requests + 1,     # (and the first row past the run's end)
                 "too_many": f"more than {max_requests:,} rows before the run's end: each is "
                             f"a request, and the most is max_requests = {max_requests:,} "
                             "(raise it at the scenario's top level, shorten the run or cut "
                             "the trace)"}
    ids = None
    if layout.reader == "jsonl":
        values, lines, ids = read_jsonl_fields(path, names, horizon=horizon_s / UNIT_S[unit],
                                               ids_field=layout.ids_field,
                                               format_name=cfg.format, **limit)
    else:
        values, lines = read_csv_columns(path, names,
                                         datetimes=(names[0],) if unit == "datetime" else (),
                                         enough=_past(names[0], unit, horizon_s), **limit)
    if len(lines) == 0:
        raise WorkloadDataError(path, "trace has no rows")
    ts = _seconds(path, names[0], values[names[0]], lines, unit)
    trace = _checked(path, names, ts, values, lines)
    if ids is None:
        return trace
    block = cfg.id_block_tokens
    counts = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
    over = counts * block >= trace.prompt_tokens + block       # more blocks than tokens
    if over.any():
        i = int(np.argmax(over))
        raise WorkloadDataError(path, f"field 'hash_ids': {int(counts[i]):,} blocks of "
                                      f"{block} tokens, more than its "
                                      f"{int(trace.prompt_tokens[i]):,}-token prompt holds "
                                      "(block_tokens says how long a trace block is)",
                                line=int(lines[i]))
    block_ids = np.empty(len(ids), dtype=object)
    for k, row_ids in enumerate(ids):
        block_ids[k] = row_ids
    return Trace(trace.timestamp_s, trace.prompt_tokens, trace.output_tokens, block_ids)


def _past(name: str, unit: str, horizon_s: float):
    """For :func:`read_csv_columns`: in a chunk, the count of rows up to and including the
    first timed at or past ``horizon_s`` (dates and times: from the first row's), or None
    while every row is before it."""
    if not math.isfinite(horizon_s):
        return None
    first_ns: list[float] = []

    def enough(values: dict[str, np.ndarray]) -> int | None:
        raw = values[name]          # NaN where a row does not read (checked if wanted)
        if unit == "datetime":
            if not first_ns and np.isfinite(raw).any():
                first_ns.append(float(raw[np.isfinite(raw)][0]))
            if not first_ns:
                return None
            seconds = (raw - first_ns[0]) / 1e9
        else:
            seconds = raw * UNIT_S[unit]
        past = np.flatnonzero(seconds >= horizon_s)
        return int(past[0]) + 1 if len(past) else None
    return enough


def _seconds(path: pathlib.Path, name: str, raw: np.ndarray, lines: np.ndarray,
             unit: str) -> np.ndarray:
    if unit != "datetime":
        return raw * UNIT_S[unit]
    # int64 ns: offsets from the first request, exactly, once the span is known to be
    # a run's (so that the difference cannot overflow)
    rough_s = raw.astype(np.float64) / 1e9
    if rough_s.max() - rough_s.min() > MAX_TIMESTAMP_S:
        i = int(np.argmax(rough_s - rough_s.min() > MAX_TIMESTAMP_S))
        raise WorkloadDataError(path, f"column {name!r}: more than 10 years after the "
                                      "earliest request (a trace spans at most a run)",
                                line=int(lines[i]))
    return (raw - raw.min()).astype(np.float64) / 1e9


def _checked(path: pathlib.Path, names: tuple[str, str, str], ts: np.ndarray,
             values: dict[str, np.ndarray], lines: np.ndarray) -> Trace:
    stamp, prompt, output = names
    if (ts < 0).any():
        i = int(np.argmax(ts < 0))
        raise WorkloadDataError(path, f"column {stamp!r}: negative timestamp",
                                line=int(lines[i]))
    if (ts > MAX_TIMESTAMP_S).any():
        i = int(np.argmax(ts > MAX_TIMESTAMP_S))
        raise WorkloadDataError(path, f"column {stamp!r}: {ts[i]:g} s is past any run (at "
                                      f"most {MAX_TIMESTAMP_S:g} s, 10 years; timestamps are "
                                      "offsets from the trace's start)", line=int(lines[i]))
    backwards = np.diff(ts) < 0
    if backwards.any():
        i = int(np.argmax(backwards)) + 1
        raise WorkloadDataError(
            path, f"column {stamp!r}: timestamps must not decrease (less than on line "
                  f"{int(lines[i - 1])})", line=int(lines[i]))
    return Trace(ts, check_token_counts(path, prompt, values[prompt], lines),
                 check_token_counts(path, output, values[output], lines))


def read_jsonl_fields(path: pathlib.Path, fields: tuple[str, ...],
                      horizon: float = math.inf, max_rows: int | None = None,
                      too_many: str | None = None, ids_field: str | None = None,
                      format_name: str = "mooncake"
                      ) -> tuple[dict[str, np.ndarray], np.ndarray, list | None]:
    """The named numeric fields of a file of one JSON object a line (blank lines skipped),
    as float64 arrays, with each object's line, and (with ``ids_field``) each object's list
    of non-negative integer ids there as a tuple (empty when it has none); reading stops
    after the first object whose first field is at or past ``horizon``. ``format_name``:
    the trace format the errors name."""
    scan_text(path, "a row of a JSON-lines trace (one object a line)")  # no NUL, no long line
    max_rows = MAX_CSV_ROWS if max_rows is None else max_rows
    too_many = too_many or f"more than {max_rows:,} rows; split the file"
    fast = read_jsonl_arrow(path, fields, horizon, max_rows, too_many, ids_field)
    if fast is not None:           # read alike in C++; else line by line, to name the fault
        return fast
    not_an_object = f"not a JSON object (a trace of format {format_name} holds one a line)"
    out: dict[str, list[float]] = {f: [] for f in fields}
    lines: list[int] = []
    ids: list[tuple] | None = [] if ids_field is not None else None
    try:
        # (utf-8-sig: a byte-order mark a Windows editor wrote before the first line)
        with open_data(path) as raw, io.TextIOWrapper(raw, encoding="utf-8-sig") as text:
            for number, line in enumerate(text, start=1):
                if not line.strip():
                    continue
                if len(lines) >= max_rows:
                    raise WorkloadDataError(path, too_many, line=number)
                try:
                    row = json.loads(line, object_pairs_hook=_Row)
                except (ValueError, RecursionError):
                    raise WorkloadDataError(path, not_an_object, line=number) from None
                if not isinstance(row, dict):
                    raise WorkloadDataError(path, not_an_object, line=number)
                twice = next((f for f in (*fields, ids_field) if f in row.twice), None)
                if twice is not None:       # json.loads would keep the last one silently
                    raise WorkloadDataError(path, f"field {twice!r}: given twice in the "
                                                  "object; give it once", line=number)
                for field in fields:
                    value = row.get(field)
                    if field not in row:
                        raise WorkloadDataError(path, f"field {field!r}: missing", line=number)
                    if type(value) not in (int, float):
                        # a string ("1_000", "1e3") or a bool is not a JSON number
                        raise WorkloadDataError(
                            path, f"field {field!r}: not a JSON number (got "
                                  f"{type(value).__name__ if value is not None else 'null'}"
                                  f"{'; write it without quotes' if isinstance(value, str) else ''})",
                            line=number)
                    try:
                        number_value = float(value)     # an int too large for a float fails
                    except OverflowError:
                        number_value = math.nan
                    if not math.isfinite(number_value):
                        raise WorkloadDataError(path, f"field {field!r}: not a finite number",
                                                line=number)
                    out[field].append(number_value)
                if ids is not None:
                    ids.append(_ids(path, row.get(ids_field, ()), ids_field, number))
                lines.append(number)
                if out[fields[0]][-1] >= horizon:
                    break
    except UnicodeDecodeError:
        raise WorkloadDataError(path, "cannot read: not UTF-8 text") from None
    except OSError as exc:
        raise WorkloadDataError(path, f"cannot read: {exc.strerror or type(exc).__name__}") \
            from None
    return ({f: np.asarray(v, dtype=np.float64) for f, v in out.items()},
            np.asarray(lines, dtype=np.int64), ids)


class _Row(dict):
    """A JSON object, with the keys it names more than once (``twice``)."""

    def __init__(self, pairs: list[tuple[str, object]]) -> None:
        super().__init__(pairs)
        seen: set[str] = set()
        self.twice: set[str] = set()
        for key, _ in pairs:
            (self.twice if key in seen else seen).add(key)


MAX_ID = 2 ** 63 - 1


def _ids(path: pathlib.Path, value, field: str, line: int) -> tuple:
    """A row's list of block ids, checked: whole numbers from 0 to 2**63 - 1."""
    if not isinstance(value, (list, tuple)) or not all(
            type(v) is int and 0 <= v <= MAX_ID for v in value):
        raise WorkloadDataError(path, f"field {field!r}: not a list of whole numbers from 0 "
                                      f"to 2**63 - 1", line=line)
    return tuple(value)
