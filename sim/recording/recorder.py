"""Columnar recording: preallocated numpy columns that grow by doubling.

A row is appended as one tuple to a short buffer; every ``BUFFER_ROWS`` rows
the buffer is transposed (in C, by ``zip``) and written into the columns a
column at a time, which costs far less than one numpy item assignment per
field. Memory holds at most one buffer of Python rows. ``columns()`` gives the
used part of each column (views, no copy).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, get_type_hints

import numpy as np

from sim.schedulers.gaps import GapHistogram


# Small enough that a buffer's rows (and the floats they hold) are still in the
# cache when it is written out: at 64 replicas, 256 rows instead of 4,096 cut the
# misses of a 2 MiB cache per request by a third (cachegrind) for no more instructions.
BUFFER_ROWS = 256


class ColumnTable:
    def __init__(self, dtypes: dict[str, str], capacity: int = 1024) -> None:
        self._dtypes = dtypes
        self._cols = {name: np.empty(capacity, dtype=dt) for name, dt in dtypes.items()}
        self._n = 0                      # rows written into the columns
        self._rows: list[tuple] = []     # rows not written yet

    def __len__(self) -> int:
        return self._n + len(self._rows)

    def _grow(self, needed: int) -> None:
        size = len(next(iter(self._cols.values())))
        while size < needed:
            size *= 2
        for name, col in self._cols.items():
            bigger = np.empty(size, dtype=col.dtype)
            bigger[: self._n] = col[: self._n]
            self._cols[name] = bigger

    def append(self, *values) -> None:
        self.append_row(values)

    def append_row(self, values: tuple) -> None:
        rows = self._rows
        rows.append(values)
        if len(rows) >= BUFFER_ROWS:
            self._flush()

    def _flush(self) -> None:
        rows = self._rows
        if not rows:
            return
        if set(map(len, rows)) != {len(self._cols)}:
            raise ValueError(f"a row must have {len(self._cols)} fields")
        i, k = self._n, len(rows)
        if i + k > len(next(iter(self._cols.values()))):
            self._grow(i + k)
        for col, values in zip(self._cols.values(), zip(*rows)):
            col[i:i + k] = values
        self._n += k
        self._rows = []

    def column(self, name: str) -> np.ndarray:
        self._flush()
        return self._cols[name][: self._n]

    def columns(self) -> dict[str, np.ndarray]:
        """Each column's used part (views: appending later may overwrite them)."""
        self._flush()
        return {name: col[: self._n] for name, col in self._cols.items()}


@dataclass(frozen=True)
class RequestField:
    """One recorded column of the request table: its name and dtype, the request's
    attribute it is read from, and the recorder's code table when the attribute is a
    string interned as a small integer (decoded back to its names in the results)."""

    column: str
    dtype: str
    attr: str
    codes: str | None = None
    in_table: bool = True       # a column of the request table (else read by the summary only)


# The request row, declared once: the recorder's append, the columns' dtypes and the
# results' decoding all follow this order (a column is added here, and in the output
# contract's REQUEST_TABLE_COLUMNS where it belongs in the request table).
REQUEST_ROW = (
    RequestField("request_id", "int64", "request_id"),
    RequestField("stream", "int32", "stream_index"),     # decoded by the run's stream names
    RequestField("session", "int64", "session"),
    RequestField("turn", "int32", "turn"),
    RequestField("team", "int32", "team", "teams"),
    RequestField("model", "int32", "model", "models"),
    RequestField("pool", "int32", "pool", "pools"),
    RequestField("replica", "int32", "replica"),
    RequestField("priority", "int32", "priority"),
    RequestField("arrival_s", "float64", "arrival_s"),
    RequestField("admitted_s", "float64", "admitted_s"),
    RequestField("first_token_s", "float64", "first_token_s"),
    RequestField("finish_s", "float64", "finish_s"),
    RequestField("prompt_tokens", "int64", "prompt_tokens"),
    RequestField("cached_prompt_tokens", "int64", "cached_prompt_tokens"),
    RequestField("output_tokens", "int64", "num_output_tokens"),
    RequestField("max_output_tokens", "int64", "max_output_tokens"),
    RequestField("status", "int8", "status", "statuses"),
    RequestField("reject_reason", "int16", "reject_reason", "reasons"),
    RequestField("preemptions", "int32", "preemptions"),
    RequestField("attempts", "int32", "attempts"),
    RequestField("max_itl_s", "float64", "max_itl_s"),
    RequestField("kv_transfer_s", "float64", "kv_transfer_s"),
    RequestField("api_key", "int32", "api_key", "keys"),
    RequestField("served_model", "int32", "served_model", "served"),
    # work on an earlier pool (cost attribution only; not columns of the request table)
    RequestField("earlier_pool", "int32", "earlier_pool", "earlier_pools", in_table=False),
    RequestField("earlier_tokens", "int64", "earlier_tokens", in_table=False),
    RequestField("carried_tokens", "int64", "carried_tokens", in_table=False),
)
REQUEST_COLUMNS = {f.column: f.dtype for f in REQUEST_ROW}


def _row_reader(fields: tuple[RequestField, ...]):
    """``make(*code_tables) -> read(req) -> row``: the row's tuple built in one
    expression, as fast as writing it out by hand (the recorder runs once per request);
    generated from the declaration, whose attribute names are identifiers of this module."""
    coded = [f"c{i}" for i, f in enumerate(fields) if f.codes is not None]
    items = [f"c{i}[req.{f.attr}]" if f.codes is not None else f"req.{f.attr}"
             for i, f in enumerate(fields)]
    assert all(f.attr.isidentifier() for f in fields)
    src = (f"def make({', '.join(coded)}):\n"
           f"    def read(req):\n"
           f"        return ({', '.join(items)},)\n"
           f"    return read\n")
    scope: dict = {}
    exec(compile(src, "<request row>", "exec"), scope)
    return scope["make"]


_make_request_reader = _row_reader(REQUEST_ROW)

class PoolSample(NamedTuple):
    """One row per pool per sampling instant: a pool's state, built by name
    (``Pool.snapshot``), recorded in this order."""

    time_s: float
    pool: int
    replicas: int
    ready: int
    starting: int
    draining: int
    queued: int
    running: int
    kv_used_blocks: int
    kv_total_blocks: int


class StepRow(NamedTuple):
    """One row per engine step, only with ``record_steps: true``."""

    pool: int
    replica: int
    start_s: float
    end_s: float
    num_tokens: float
    num_seqs: int
    kv_used_blocks: int
    kv_total_blocks: int


_DTYPES = {float: "float64", int: "int32"}
# int columns whose values need more than 32 bits on a large fleet
_WIDE = {"queued", "running", "kv_used_blocks", "kv_total_blocks", "num_seqs"}


def columns_of(row: type) -> dict[str, str]:
    """A row type's columns and their dtypes (from its annotations, resolved:
    under postponed evaluation they are names, not types)."""
    return {name: "int64" if kind is int and name in _WIDE else _DTYPES[kind]
            for name, kind in get_type_hints(row).items()}


SAMPLE_COLUMNS = columns_of(PoolSample)
STEP_COLUMNS = columns_of(StepRow)


class Codes(dict):
    """Interns strings (team names, statuses, reasons) as small integer codes:
    ``codes[name]`` is the name's code, given on its first lookup (a plain dict
    lookup once known, which is what the recorder's hot path does)."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.names: list[str] = []
        for name in initial:
            self[name]

    def __missing__(self, name: str) -> int:
        idx = self[name] = len(self.names)
        self.names.append(name)
        return idx

    def code(self, name: str) -> int:
        return self[name]


class Recorder:
    def __init__(self, record_steps: bool = False, measured_from_s: float = 0.0) -> None:
        self.requests = ColumnTable(REQUEST_COLUMNS)
        # the run's pooled gaps between output tokens, of requests arriving from
        # ``measured_from_s`` (the warm-up's end) on; every replica's scheduler adds to it
        self.gaps = GapHistogram(measured_from_s)
        self.samples = ColumnTable(SAMPLE_COLUMNS)
        self.steps = ColumnTable(STEP_COLUMNS) if record_steps else None
        self.teams = Codes()
        self.models = Codes()
        self.pools = Codes()
        self.statuses = Codes(("completed", "rejected", "unfinished"))
        self.reasons = Codes(("",))
        self.keys = Codes(("",))          # API key ids (never secrets)
        self.served = Codes(("",))        # model names as the client asked (alias resolved)
        self.earlier_pools = Codes(("",))  # a pool that worked on a request before its last
        self._read_request = _make_request_reader(
            *(getattr(self, f.codes) for f in REQUEST_ROW if f.codes is not None))

    def record_request(self, req) -> None:
        """One row of ``REQUEST_ROW``, read from the request as it ends."""
        self.requests.append_row(self._read_request(req))

    def code_table(self, field: RequestField) -> "Codes":
        """The code table that interns ``field``'s strings."""
        return getattr(self, field.codes)
