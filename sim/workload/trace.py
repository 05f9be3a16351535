"""Read request data from CSV files and replay recorded traces.

Bad input files are the most common failure of a capacity study, so every
problem is reported as :class:`WorkloadDataError` naming the file and, where
known, the 1-based line of the CSV (line 1 is the header). Messages name the
column and the line, never a value read from the file: a path may have named
a file that is not a trace at all. Where a file may be read from is
:mod:`sim.config.inputs`'s.
"""
from __future__ import annotations

import csv
import difflib
import gzip
import io
import os
import pathlib
import warnings
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

import numpy as np

from sim.config.lengths import MAX_TOKENS
from sim.config.workload import TraceArrivalConfig
from sim.config.inputs import MAX_DATA_BYTES, DataFiles, InputFileError, as_data_files, open_regular
from sim.workload.plain_csv import read_plain_columns

if TYPE_CHECKING:
    import pandas as pd
    from sim.workload.trace_formats import Trace

TRACE_COLUMNS = ("timestamp", "prompt_tokens", "output_tokens")


class WorkloadDataError(ValueError):
    """A trace or length file is missing or holds values the workload cannot use."""

    def __init__(self, path: pathlib.Path | str, message: str, line: Optional[int] = None):
        self.path = pathlib.Path(path)
        self.message = message
        self.line = line
        where = f"{self.path}:{line}" if line is not None else f"{self.path}"
        super().__init__(f"{where}: {message}")


def resolve_path(path: str, base_dir: DataFiles | pathlib.Path) -> pathlib.Path:
    """Relative paths are relative to the scenario file, not the working directory,
    so a scenario runs the same from anywhere. A :class:`~sim.config.inputs.DataFiles`
    also bounds where the file may lie (WorkloadDataError outside)."""
    try:
        return as_data_files(base_dir).path(path)
    except InputFileError as exc:
        raise WorkloadDataError(exc.path, exc.message) from None


def _csv_problem_line(exc: Exception) -> Optional[int]:
    """The line a pandas parser error names, if any (its text is not shown: it may quote
    the file)."""
    import re
    found = re.search(r"\b(?:line|row) (\d+)", str(exc))
    return int(found.group(1)) if found else None


# A CSV line longer than this is not a row of numbers (a binary file, a file of one line)
MAX_CSV_LINE_BYTES = 64 * 2**10
# Rows read from one file: each column is kept as float64 beside a line number
MAX_CSV_ROWS = 50_000_000
# Blank (or blank-looking) lines one file may hold: a trace has a few at most, and a file
# of millions of them (a gzip of a few MB can hold billions) is not a trace
MAX_BLANK_LINES = 1_000_000
# A gzip trace may decompress to this many times its own size (or to MIN_GZIP_CAP_BYTES,
# whichever is more): traces of numbers compress 3-10 times; a file past it is repeated
# text, refused before it is inflated whole
MAX_GZIP_RATIO = 100
MIN_GZIP_CAP_BYTES = 64 * 2**20
_SCAN_BLOCK_BYTES = 16 * 2**20
_CHUNK_ROWS = 1_000_000


def _size(nbytes: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{int(nbytes)} bytes"


class _Capped(io.RawIOBase):
    """A decompressed stream that refuses to grow past ``cap`` bytes (a gzip bomb): the
    smaller of ``MAX_DATA_BYTES`` and ``MAX_GZIP_RATIO`` times the compressed size (at least
    ``MIN_GZIP_CAP_BYTES``)."""

    def __init__(self, inner, path: pathlib.Path, compressed_bytes: int) -> None:
        self._inner, self._path, self._seen = inner, path, 0
        self._compressed = compressed_bytes
        self._cap = min(MAX_DATA_BYTES, max(MIN_GZIP_CAP_BYTES,
                                            MAX_GZIP_RATIO * compressed_bytes))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self._inner.read(len(buffer))
        except (EOFError, gzip.BadGzipFile, zlib.error):
            raise WorkloadDataError(self._path, "not gzip data, or cut short (a file named "
                                                "*.gz must be gzip-compressed)") from None
        self._seen += len(data)
        if self._seen > self._cap:
            if self._cap == MAX_DATA_BYTES:
                raise WorkloadDataError(self._path, f"decompresses to more than "
                                                    f"{_size(self._cap)}")
            raise WorkloadDataError(
                self._path, f"decompresses to more than {_size(self._cap)}, over "
                            f"{MAX_GZIP_RATIO} times its {_size(self._compressed)}: repeated "
                            f"text, not a trace (traces compress 3-10 times)")
        buffer[:len(data)] = data
        return len(data)

    def close(self) -> None:
        self._inner.close()
        super().close()


def open_data(path: pathlib.Path):
    """A data file opened for reading in binary (a regular file, see
    :func:`sim.config.inputs.open_regular`), decompressed when its name ends in ``.gz``."""
    raw = open_regular(path, max_bytes=MAX_DATA_BYTES)
    if pathlib.Path(path).suffix.lower() != ".gz":
        return raw
    compressed = os.fstat(raw.fileno()).st_size
    return io.BufferedReader(_Capped(gzip.GzipFile(fileobj=raw), pathlib.Path(path),
                                     compressed))


_SPACE = np.zeros(256, dtype=bool)
_SPACE[list(b" \t\r\x0b\x0c")] = True


def _blank_lines(data: np.ndarray, ends: np.ndarray, length: np.ndarray) -> int:
    """How many lines that end in ``data`` (at the newlines ``ends``, ``length`` bytes
    long before their newline) are empty or hold one or two spaces (a carriage return, a
    tab). Longer lines of spaces are not counted (they cost as much as a row)."""
    blank = length == 0
    for width in (1, 2):
        short = np.flatnonzero((length == width) & (ends >= width))
        if short.size:
            ok = np.ones(short.size, dtype=bool)
            for back in range(1, width + 1):
                ok &= _SPACE[data[ends[short] - back]]
            blank[short] = ok
    return int(blank.sum())


def scan_text(path: pathlib.Path, kind: str = "a CSV of numbers") -> bool:
    """Refuse a file with NUL bytes, a line over MAX_CSV_LINE_BYTES or more than
    MAX_BLANK_LINES blank lines before pandas reads it (a 2 GB file of one line would be
    held whole, several times over; billions of blank lines would be walked one by one);
    ``kind`` says what such a file is not. Returns whether the file holds a double quote (a
    quoted field may span lines)."""
    line, since_newline, quoted, blank = 1, 0, False, 0
    with open_data(path) as fh:
        while block := fh.read(_SCAN_BLOCK_BYTES):
            quoted = quoted or b'"' in block
            if b"\0" in block:
                at = block.index(b"\0")
                raise WorkloadDataError(path, "holds NUL bytes: not a text file",
                                        line=line + block.count(b"\n", 0, at))
            data = np.frombuffer(block, dtype=np.uint8)
            ends = np.flatnonzero(data == 10)
            if ends.size == 0:
                since_newline += len(block)
            else:
                gaps = np.diff(ends, prepend=-1 - since_newline) - 1   # line lengths
                blank += _blank_lines(data, ends, gaps)
                if blank > MAX_BLANK_LINES:
                    raise WorkloadDataError(
                        path, f"holds more than {MAX_BLANK_LINES:,} blank lines among its "
                              f"first {line + ends.size - 1:,}: not {kind}; remove them")
                longest = int(np.argmax(gaps))
                if gaps[longest] > MAX_CSV_LINE_BYTES:
                    since_newline = int(gaps[longest])
                    line += longest
                    break
                line += ends.size
                since_newline = len(block) - 1 - int(ends[-1])
            if since_newline > MAX_CSV_LINE_BYTES:
                break
    if since_newline > MAX_CSV_LINE_BYTES:
        raise WorkloadDataError(path, f"a line is longer than {MAX_CSV_LINE_BYTES // 1024} KiB: "
                                      f"not {kind}", line=line)
    return quoted


def _record_lines(path: pathlib.Path) -> np.ndarray:
    """The line each record after the header starts on, for a file whose quoted fields
    may span lines (a blank line is a record, as pandas reads it with blank lines kept)."""
    starts = []
    with open_data(path) as raw, io.TextIOWrapper(raw, newline="", encoding="utf-8") as text:
        reader = csv.reader(text)
        next(reader, None)
        line = reader.line_num + 1
        for _ in reader:
            starts.append(line)
            line = reader.line_num + 1
    return np.asarray(starts, dtype=np.int64)


def read_csv_columns(path: pathlib.Path, columns: tuple[str, ...],
                     datetimes: tuple[str, ...] = (),
                     enough: Callable[[dict[str, np.ndarray]], int | None] | None = None,
                     max_rows: int | None = None,
                     too_many: str | None = None
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """Read the named numeric columns of a CSV file as float64 arrays (those named in
    ``datetimes`` as dates and times: int64 nanoseconds since 1970).

    Returns the columns and, for each row, its 1-based line number in the
    file, so later checks can point at the offending line. Rows that are
    entirely empty are skipped. The file is read a million rows at a time, so
    memory grows with the numbers kept, not with the text. ``enough``, given a chunk's
    columns, may say how many of its rows are the last wanted: reading stops there. More
    than ``max_rows`` rows wanted is an error (``too_many``, when given, is its message).
    """
    try:
        quoted = scan_text(path)
    except InputFileError as exc:
        message = "file not found" if exc.message == "not found" else exc.message
        raise WorkloadDataError(path, message) from None
    except OSError as exc:
        raise WorkloadDataError(path, f"cannot read: {exc.strerror or exc}") from None
    max_rows = MAX_CSV_ROWS if max_rows is None else max_rows
    if not quoted and not datetimes:    # numbers only: most files are plain, read without pandas
        try:
            plain = read_plain_columns(path, columns, open_data, max_rows, enough)
        except (InputFileError, OSError):
            plain = None                # the reader below says what is wrong
        if plain is not None:
            return plain
    import pandas as pd
    record_lines = None         # exact lines when a quoted field may span several
    if quoted:
        try:
            record_lines = _record_lines(path)
        except (csv.Error, UnicodeDecodeError, OSError):
            record_lines = None   # pandas reports it below
    parts: dict[str, list[np.ndarray]] = {c: [] for c in columns}
    line_parts: list[np.ndarray] = []
    rows = 0
    try:
        with open_data(path) as fh, warnings.catch_warnings():
            # a row with more fields than the header: an error, never a silent misread
            warnings.simplefilter("error", pd.errors.ParserWarning)
            chunks = pd.read_csv(fh, dtype=str, keep_default_na=False, index_col=False,
                                 skip_blank_lines=False, skipinitialspace=True,
                                 encoding="utf-8", chunksize=_CHUNK_ROWS)
            for i, frame in enumerate(chunks):
                if i == 0:
                    _check_header(path, frame, columns)
                frame.columns = [str(c).strip() for c in frame.columns]
                # Header is line 1; with blank lines kept, data row i is on line i + 2.
                lines = np.arange(rows, rows + len(frame), dtype=np.int64) + 2
                if record_lines is not None and rows + len(frame) <= len(record_lines):
                    lines = record_lines[rows:rows + len(frame)]
                last = enough(_lenient(frame, columns[0], datetimes)) \
                    if enough is not None else None
                if last is not None:            # the rows after it are neither read nor checked
                    frame, lines = frame.iloc[:last], lines[:last]
                if rows + len(frame) > max_rows:
                    raise WorkloadDataError(path, too_many or f"more than {max_rows:,} rows; "
                                                  "split the file or keep the rows the run "
                                                  "needs", line=int(lines[max_rows - rows]))
                rows += len(frame)
                values, lines = _numeric_columns(path, frame, columns, lines, datetimes)
                for name in columns:
                    parts[name].append(values[name])
                line_parts.append(lines)
                if last is not None:
                    break
    except pd.errors.ParserWarning:
        with open_data(path) as raw, \
                io.TextIOWrapper(raw, newline="", encoding="utf-8") as text:
            reader = csv.reader(text)
            width = len(next(reader))
            line = next((i for i, row in enumerate(reader, start=2) if len(row) > width), None)
        raise WorkloadDataError(path, f"a row has more fields than the header's {width}",
                                line=line) from None
    except UnicodeDecodeError:
        raise WorkloadDataError(path, "cannot read as CSV: not UTF-8 text") from None
    except pd.errors.EmptyDataError:
        raise WorkloadDataError(path, "cannot read as CSV: the file is empty") from None
    except pd.errors.ParserError as exc:
        raise WorkloadDataError(path, "cannot read as CSV (a quote left open, or rows of "
                                      "different widths)", line=_csv_problem_line(exc)) \
            from None
    except InputFileError as exc:
        raise WorkloadDataError(path, exc.message) from None
    except OSError as exc:
        raise WorkloadDataError(path, f"cannot read: {exc.strerror or exc}") from None
    out = {name: np.concatenate(parts[name]) if parts[name] else
           np.zeros(0, dtype=np.int64 if name in datetimes else np.float64) for name in columns}
    lines = np.concatenate(line_parts) if line_parts else np.zeros(0, dtype=np.int64)
    return out, lines


def _check_header(path: pathlib.Path, frame: pd.DataFrame, columns: tuple[str, ...]) -> None:
    """Every wanted column named once in the header (line 1)."""
    names = [str(c).strip() for c in frame.columns]
    missing = [c for c in columns if c not in names]
    if missing:
        hints = [m for c in missing
                 for m in difflib.get_close_matches(c, [f for f in names if f.isprintable()],
                                                    1, 0.8)]
        hint = f" (did you mean {', '.join(map(repr, hints))}?)" if hints else ""
        raise WorkloadDataError(path, f"missing column(s) {', '.join(map(repr, missing))}: "
                                      f"line 1 must be a header naming them; it has "
                                      f"{len(names)} column(s){hint}", line=1)
    with open_data(path) as raw, \
            io.TextIOWrapper(raw, newline="", encoding="utf-8") as header_text:
        header = [h.strip() for h in next(csv.reader(header_text), [])]
    twice = sorted({h for h in header if h in columns and header.count(h) > 1})
    if twice:       # pandas would read the first and rename the other: refuse instead
        raise WorkloadDataError(path, f"the header names column(s) "
                                      f"{', '.join(map(repr, twice))} more than once", line=1)


def _lenient(frame: pd.DataFrame, name: str, datetimes: tuple[str, ...]
             ) -> dict[str, np.ndarray]:
    """One column of a chunk as numbers (dates and times as float nanoseconds), whatever
    does not read as one NaN: to find where the wanted rows end before checking them."""
    import pandas as pd
    text = frame[name].str.strip()
    if name in datetimes:
        try:
            when = pd.to_datetime(text, errors="coerce", format="ISO8601", utc=True)
            values = when.to_numpy(dtype="datetime64[ns]").astype(np.int64).astype(np.float64)
            values[when.isna().to_numpy()] = np.nan
        except (ValueError, OverflowError, TypeError):
            values = np.full(len(text), np.nan)
    else:
        values = pd.to_numeric(text, errors="coerce").to_numpy(dtype=np.float64)
    return {name: values}


def _numeric_columns(path: pathlib.Path, frame: pd.DataFrame, columns: tuple[str, ...],
                     lines: np.ndarray, datetimes: tuple[str, ...] = ()
                     ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """One chunk's wanted columns as finite floats (or datetimes as int64 ns), blank rows
    dropped."""
    import pandas as pd
    text = frame[list(columns)].apply(lambda col: col.str.strip())
    keep = (text != "").any(axis=1).to_numpy()
    text, lines = text[keep], lines[keep]
    out: dict[str, np.ndarray] = {}
    for name in columns:
        if name in datetimes:
            try:        # times with a UTC offset are converted to UTC; those without are UTC
                when = pd.to_datetime(text[name], errors="coerce", format="ISO8601", utc=True)
            except (ValueError, OverflowError, TypeError):
                raise WorkloadDataError(path, f"column {name!r}: dates and times that do not "
                                              "read as one time line (YYYY-MM-DD "
                                              "HH:MM:SS[.fraction][+HH:MM])") from None
            bad = when.isna().to_numpy()
            if bad.any():
                i = int(np.argmax(bad))
                raise WorkloadDataError(path, f"column {name!r}: not a date and time "
                                              "(YYYY-MM-DD HH:MM:SS[.fraction])",
                                        line=int(lines[i]))
            out[name] = when.to_numpy(dtype="datetime64[ns]").astype(np.int64)
            continue
        values = pd.to_numeric(text[name], errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            i = int(np.argmax(bad))
            raw = text[name].iloc[i]
            what = "missing value" if raw == "" or pd.isna(raw) else \
                "not a finite number"
            raise WorkloadDataError(path, f"column {name!r}: {what}", line=int(lines[i]))
        out[name] = values
    return out, lines


def check_token_counts(path: pathlib.Path, name: str, values: np.ndarray,
                       line_numbers: np.ndarray) -> np.ndarray:
    """Lengths must be whole numbers of at least one token; returns them as int64."""
    bad = (values < 1) | (values != np.floor(values))
    if bad.any():
        i = int(np.argmax(bad))
        raise WorkloadDataError(path, f"column {name!r}: not a whole number >= 1",
                                line=int(line_numbers[i]))
    huge = values > MAX_TOKENS
    if huge.any():
        i = int(np.argmax(huge))
        raise WorkloadDataError(path, f"column {name!r}: more than {MAX_TOKENS:,} tokens, "
                                "longer than any model's context", line=int(line_numbers[i]))
    return values.astype(np.int64)


# a looped trace is copied whole before the run: bounded like max_requests' default
MAX_LOOPED_REQUESTS = 20_000_000


def replay_trace(cfg: TraceArrivalConfig, trace: "Trace", path: pathlib.Path,
                 start_s: float, stop_s: float, rate_scale: float
                 ) -> tuple[np.ndarray, ...]:
    """Place the trace's requests in run time: ``start_s + timestamp * time_scale /
    rate_scale``, keeping those before ``stop_s``; with them, each request's row of the
    trace and its copy of the trace (0 unless looped).

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
        with np.errstate(over="ignore"):
            wanted = max(1.0, float(np.ceil((stop_s - start_s) / period_s)))
        if not wanted * len(ts) <= MAX_LOOPED_REQUESTS:        # inf too
            raise WorkloadDataError(
                path, f"looping this trace (period {period_s:g} s) over the run would send "
                      f"{wanted * len(ts):,.0f} requests, more than {MAX_LOOPED_REQUESTS:,}; "
                      f"shorten the run, or set time_scale to stretch the trace")
        copies = int(wanted)
    offsets_s = np.arange(copies, dtype=np.float64) * period_s
    arrival_s = start_s + (offsets_s[:, None] + ts[None, :] * factor).ravel()
    keep = arrival_s < stop_s
    if arrival_s.size and not keep.any():
        raise WorkloadDataError(
            path, f"every request of the trace arrives at or after {stop_s:g} s, when the "
                  f"stream's arrivals end (its first at {arrival_s.min():g} s): the stream "
                  "would send nothing; lengthen the run or lower time_scale")
    return (arrival_s[keep], np.tile(trace.prompt_tokens, copies)[keep],
            np.tile(trace.output_tokens, copies)[keep],
            np.tile(np.arange(len(ts), dtype=np.int64), copies)[keep],
            np.repeat(np.arange(copies, dtype=np.int64), len(ts))[keep])
