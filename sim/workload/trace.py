"""Read request data from CSV files and replay recorded traces.

Bad input files are the most common failure of a capacity study, so every
problem is reported as :class:`WorkloadDataError` naming the file and, where
known, the 1-based line of the CSV (line 1 is the header).
"""
from __future__ import annotations

import pathlib
import warnings
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from sim.config.workload import TraceArrivalConfig

TRACE_COLUMNS = ("timestamp", "prompt_tokens", "output_tokens")


class WorkloadDataError(ValueError):
    """A trace or length file is missing or holds values the workload cannot use."""

    def __init__(self, path: pathlib.Path | str, message: str, line: Optional[int] = None):
        self.path = pathlib.Path(path)
        self.message = message
        self.line = line
        where = f"{self.path}:{line}" if line is not None else f"{self.path}"
        super().__init__(f"{where}: {message}")


def resolve_path(path: str, base_dir: pathlib.Path) -> pathlib.Path:
    """Relative paths are relative to the scenario file, not the working directory,
    so a scenario runs the same from anywhere."""
    p = pathlib.Path(path).expanduser()
    return p if p.is_absolute() else pathlib.Path(base_dir) / p


def read_csv_columns(path: pathlib.Path, columns: tuple[str, ...]
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Read the named numeric columns of a CSV file as float64 arrays.

    Returns the columns and, for each row, its 1-based line number in the
    file, so later checks can point at the offending line. Rows that are
    entirely empty are skipped.
    """
    if not path.is_file():
        raise WorkloadDataError(path, "file not found")
    try:
        with warnings.catch_warnings():
            # a row with more fields than the header: an error, never a silent misread
            warnings.simplefilter("error", pd.errors.ParserWarning)
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, index_col=False,
                                skip_blank_lines=False, skipinitialspace=True)
    except pd.errors.ParserWarning:
        import csv
        with open(path, newline="", encoding="utf-8") as fh:
            rows = csv.reader(fh)
            width = len(next(rows))
            line = next((i for i, row in enumerate(rows, start=2) if len(row) > width), None)
        raise WorkloadDataError(path, f"a row has more fields than the header's {width}",
                                line=line) from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as exc:
        raise WorkloadDataError(path, f"cannot read as CSV: {exc}") from exc
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        found = ", ".join(repr(c) for c in frame.columns) or "none"
        raise WorkloadDataError(path, f"missing column(s) {', '.join(map(repr, missing))}; "
                                      f"columns found: {found}", line=1)
    # Header is line 1; with blank lines kept, data row i is on line i + 2.
    line_numbers = np.arange(len(frame), dtype=np.int64) + 2
    text = frame[list(columns)].apply(lambda col: col.str.strip())
    keep = (text != "").any(axis=1).to_numpy()
    text, line_numbers = text[keep], line_numbers[keep]
    out: dict[str, np.ndarray] = {}
    for name in columns:
        values = pd.to_numeric(text[name], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raw = text[name].iloc[i]
            what = "missing value" if raw == "" or pd.isna(raw) else \
                f"{raw!r} is not a finite number"
            raise WorkloadDataError(path, f"column {name!r}: {what}",
                                    line=int(line_numbers[i]))
        out[name] = values
    return out, line_numbers


def check_token_counts(path: pathlib.Path, name: str, values: np.ndarray,
                       line_numbers: np.ndarray) -> np.ndarray:
    """Lengths must be whole numbers of at least one token; returns them as int64."""
    bad = (values < 1) | (values != np.floor(values))
    if bad.any():
        i = int(np.argmax(bad))
        raise WorkloadDataError(path, f"column {name!r}: {values[i]:g} is not a whole "
                                      f"number >= 1", line=int(line_numbers[i]))
    return values.astype(np.int64)


@dataclass(frozen=True)
class Trace:
    """A validated trace: timestamps in seconds (>= 0, non-decreasing) and lengths."""

    timestamp_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray


def load_trace(path: pathlib.Path) -> Trace:
    """Read and check a trace CSV (columns ``timestamp``, ``prompt_tokens``,
    ``output_tokens``)."""
    cols, lines = read_csv_columns(path, TRACE_COLUMNS)
    if len(lines) == 0:
        raise WorkloadDataError(path, "trace has no rows")
    ts = cols["timestamp"]
    if (ts < 0).any():
        i = int(np.argmax(ts < 0))
        raise WorkloadDataError(path, f"negative timestamp {ts[i]:g}", line=int(lines[i]))
    backwards = np.diff(ts) < 0
    if backwards.any():
        i = int(np.argmax(backwards)) + 1
        raise WorkloadDataError(
            path, f"timestamps must not decrease: {ts[i]:g} comes after {ts[i - 1]:g}",
            line=int(lines[i]))
    return Trace(ts,
                 check_token_counts(path, "prompt_tokens", cols["prompt_tokens"], lines),
                 check_token_counts(path, "output_tokens", cols["output_tokens"], lines))


def replay_trace(cfg: TraceArrivalConfig, trace: Trace, path: pathlib.Path,
                 start_s: float, stop_s: float, rate_scale: float
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Place the trace's requests in run time: ``start_s + timestamp * time_scale /
    rate_scale``, keeping those before ``stop_s``.

    With ``loop``, copies follow one another with period ``last timestamp +
    one mean gap`` (scaled), so the seam looks like any other gap instead of
    stacking two requests at the same instant.
    """
    factor = cfg.time_scale / rate_scale
    ts = trace.timestamp_s
    copies = 1
    period_s = 0.0
    if cfg.loop:
        mean_gap = (ts[-1] - ts[0]) / (len(ts) - 1) if len(ts) > 1 else 0.0
        period_s = (ts[-1] + mean_gap) * factor
        if not period_s > 0:
            raise WorkloadDataError(path, "cannot loop a trace whose timestamps are all 0")
        copies = max(1, int(np.ceil((stop_s - start_s) / period_s)))
    offsets_s = np.arange(copies, dtype=np.float64) * period_s
    arrival_s = start_s + (offsets_s[:, None] + ts[None, :] * factor).ravel()
    keep = arrival_s < stop_s
    return (arrival_s[keep], np.tile(trace.prompt_tokens, copies)[keep],
            np.tile(trace.output_tokens, copies)[keep])
