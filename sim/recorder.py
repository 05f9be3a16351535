"""Columnar recording: preallocated numpy columns that grow by doubling.

Rows are appended field by field without creating a Python object per row;
``frame()`` hands the used part to pandas without copying the Python way.
"""
from __future__ import annotations

import numpy as np
import pandas as pd


class ColumnTable:
    def __init__(self, dtypes: dict[str, str], capacity: int = 1024) -> None:
        self._dtypes = dtypes
        self._cols = {name: np.empty(capacity, dtype=dt) for name, dt in dtypes.items()}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def _grow(self) -> None:
        for name, col in self._cols.items():
            bigger = np.empty(2 * len(col), dtype=col.dtype)
            bigger[: self._n] = col[: self._n]
            self._cols[name] = bigger

    def append(self, *values) -> None:
        if self._n == len(next(iter(self._cols.values()))):
            self._grow()
        i = self._n
        for col, value in zip(self._cols.values(), values):
            col[i] = value
        self._n += 1

    def column(self, name: str) -> np.ndarray:
        return self._cols[name][: self._n]

    def frame(self) -> pd.DataFrame:
        return pd.DataFrame({name: col[: self._n].copy() for name, col in self._cols.items()})


REQUEST_COLUMNS = {
    "request_id": "int64", "stream": "int32", "team": "int32", "model": "int32", "pool": "int32",
    "replica": "int32", "priority": "int32", "arrival_s": "float64", "admitted_s": "float64",
    "first_token_s": "float64", "finish_s": "float64", "prompt_tokens": "int64",
    "cached_prompt_tokens": "int64", "output_tokens": "int64", "max_output_tokens": "int64",
    "status": "int8", "reject_reason": "int16", "preemptions": "int32", "attempts": "int32",
    "max_itl_s": "float64", "kv_transfer_s": "float64", "api_key": "int32",
    "served_model": "int32",
}

# One row per pool per sampling instant.
SAMPLE_COLUMNS = {
    "time_s": "float64", "pool": "int32", "replicas": "int32", "ready": "int32",
    "starting": "int32", "draining": "int32", "queued": "int64",
    "running": "int64", "kv_used_blocks": "int64", "kv_total_blocks": "int64",
}

# One row per step, only with ``record_steps: true``.
STEP_COLUMNS = {
    "pool": "int32", "replica": "int32", "start_s": "float64", "end_s": "float64",
    "num_tokens": "float64", "num_seqs": "int64", "kv_used_blocks": "int64",
    "kv_total_blocks": "int64",
}


class Codes:
    """Interns strings (team names, statuses, reasons) as small integer codes."""

    def __init__(self, initial: tuple[str, ...] = ()) -> None:
        self.names: list[str] = []
        self._index: dict[str, int] = {}
        for name in initial:
            self.code(name)

    def code(self, name: str) -> int:
        idx = self._index.get(name)
        if idx is None:
            idx = self._index[name] = len(self.names)
            self.names.append(name)
        return idx

    def decode(self, codes: np.ndarray) -> pd.Categorical:
        return pd.Categorical.from_codes(codes.astype(np.int64), categories=self.names)


class Recorder:
    def __init__(self, record_steps: bool = False) -> None:
        self.requests = ColumnTable(REQUEST_COLUMNS)
        self.samples = ColumnTable(SAMPLE_COLUMNS)
        self.steps = ColumnTable(STEP_COLUMNS) if record_steps else None
        self.teams = Codes()
        self.models = Codes()
        self.pools = Codes()
        self.statuses = Codes(("completed", "rejected", "unfinished"))
        self.reasons = Codes(("",))
        self.keys = Codes(("",))          # API key ids (never secrets)
        self.served = Codes(("",))        # model names as the client asked (alias resolved)

    def record_request(self, req, stream_index: int) -> None:
        self.requests.append(
            req.request_id, stream_index, self.teams.code(req.team), self.models.code(req.model),
            self.pools.code(req.pool), req.replica, req.priority, req.arrival_s, req.admitted_s,
            req.first_token_s, req.finish_s, req.prompt_tokens, req.cached_prompt_tokens,
            req.num_output_tokens, req.max_output_tokens, self.statuses.code(req.status),
            self.reasons.code(req.reject_reason), req.preemptions, req.attempts,
            req.max_itl_s, req.kv_transfer_s, self.keys.code(req.api_key),
            self.served.code(req.served_model))
