"""Write one run's results to a folder, atomically and reproducibly.

The folder holds::

    summary.json       the summary dictionary (strict JSON: NaN/inf become null)
    requests.parquet   one row per request, dtypes kept (not with ``requests=False``)
    steps.parquet      one row per engine step (only with ``record_steps``)
    requests.csv       the same rows as requests.parquet; categories as plain strings,
                       floats in full (only with ``csv``)
    steps.csv          the same rows as steps.parquet (only with ``csv``)
    timeseries.csv     one row per pool per sample
    scenario.yaml      the scenario as validated, every default filled in
    report.html        one self-contained page, its charts drawn by the browser from
                       the run's data in it (not with ``report=False``)
    plots/*.png        the same charts as PNG images, see :mod:`sim.output.pages.plots` (only
                       with ``png=True``: drawing them with matplotlib takes longer than
                       a small run)
    .fleetsim-output   the marker that lets ``--force`` replace the folder later

Everything is written into a hidden sibling folder first and renamed into
place at the end, so an interrupted run never leaves a folder that looks
complete. Identical results give byte-identical files: nothing depends on
the clock (``Results.wall_s`` is deliberately left out).

A text cell of a CSV file that a spreadsheet would read as a formula (it
starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is written
with a leading ``'`` (OWASP's rule); numeric columns and the parquet file keep
their values as they are.

The tables with a row per request or per engine step are written once, as Parquet
(``csv=True``, ``fleetsim run --csv``, adds a CSV copy of each): a simulated day's
request table was 307 MB of CSV beside 82 MB of Parquet (writing the CSV took 4-5 s,
the Parquet 1-2), and a day of engine steps about 1.3 GB of CSV. Their columns are compressed with zstd; text columns are
dictionary-encoded (the Categoricals the recorder interns); floats stay float64
(``arrival_s`` over a day needs more digits than float32's seven, and the columns
round-trip exactly). The time series, a row per pool per sample (0.7 MB for a day
sampled every 10 s), stays a CSV file.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.yamlio import dump_data

from sim.output.files.atomic_write import write_folder

__all__ = ["csv_safe", "summary_json", "write_folder", "write_outputs"]

# Summary keys that depend on the machine or the clock, never written.
_VOLATILE_KEYS = ("wall_s",)


def _plain(value: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to None, tuples to lists."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summary_json(summary: dict) -> str:
    """The text of summary.json (strict JSON, key order kept, trailing newline)."""
    clean = {k: v for k, v in summary.items() if k not in _VOLATILE_KEYS}
    return json.dumps(_plain(clean), indent=2, sort_keys=False, allow_nan=False) + "\n"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _defused(value: Any) -> Any:
    if isinstance(value, str) and value.startswith(FORMULA_STARTS):
        return "'" + value
    return value


def _risky(values):
    """True where a value (of a pandas Series) is text that starts like a formula."""
    import pandas as pd
    try:
        return values.str.startswith(FORMULA_STARTS, na=False).astype(bool)
    except AttributeError:              # no text in the column at all
        return pd.Series(False, index=values.index)


def csv_safe(df):
    """``df`` (a pandas DataFrame) for a CSV file: categorical columns as plain strings
    (missing stays empty), and text cells and column names that a spreadsheet would take
    for a formula prefixed with ``'``. Numeric columns are left alone."""
    import pandas as pd
    changed: dict[str, pd.Series] = {}
    for c in df.columns:
        column = df[c]
        if isinstance(column.dtype, pd.CategoricalDtype):
            cats = column.cat.categories
            if _risky(pd.Series(cats, dtype=object)).any():
                column = column.cat.rename_categories([_defused(v) for v in cats])
            changed[c] = column.astype(object)
        elif column.dtype == object or pd.api.types.is_string_dtype(column.dtype):
            mask = _risky(column)
            if mask.any():
                fixed = column.copy()
                fixed[mask] = "'" + column[mask].astype(str)
                changed[c] = fixed
    out = df
    if changed:
        out = df.copy(deep=False)
        for c, column in changed.items():
            out[c] = column
    names = [_defused(c) for c in out.columns]
    return out.set_axis(names, axis=1) if names != list(out.columns) else out


def _write_csv(table, path: Path) -> None:
    """Arrow's writer (``table``: a run's :class:`sim.output.columns.Table`): floats as
    the shortest text that reads back exactly, quotes only where a cell needs them, NaN
    as an empty cell, text that starts like a formula defused; seven times pandas' speed
    (a 1.9M-request table is half a gigabyte of text)."""
    import pyarrow.csv as pa_csv

    pa_csv.write_csv(table.arrow(rename=_defused), path,
                     pa_csv.WriteOptions(quoting_style="needed"))


# Parquet's codec: zstd at Arrow's default level makes a day's request table 15% smaller
# than snappy, Arrow's default (70 MB against 82 MB, in about the same 1.2-1.9 s), and
# faster to read back; pandas, polars, DuckDB and Spark read it. Splitting the floats'
# bytes (BYTE_STREAM_SPLIT) would save 7% more, in some columns only, at the cost of a
# choice per column
PARQUET_COMPRESSION = "zstd"


def _write_parquet(table, path: Path) -> None:
    """``table`` (a :class:`sim.output.columns.Table`) as one Parquet file."""
    import pyarrow.parquet as pq
    pq.write_table(table.arrow(), path, compression=PARQUET_COMPRESSION)


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def _write_all(results, folder: Path, sweep=None, report: bool = True,
               requests: bool = True, csv: bool = False, png: bool = False) -> list[Path]:
    """Write every output file into ``folder`` (the page only with ``report``, the PNG
    plots only with ``png``, the request table only with ``requests``, the CSV copies of
    the per-row tables only with ``csv``); returns their paths."""
    written = []
    path = folder / "summary.json"
    _write_text(path, summary_json(results.summary))
    written.append(path)

    tables = results.tables
    per_row = [(name, table) for name, table in (
        ("requests", tables.requests if requests else None), ("steps", tables.steps))
        if table is not None]
    for name, table in per_row:
        path = folder / f"{name}.parquet"
        _write_parquet(table, path)
        written.append(path)
    for name, table in (per_row if csv else []) + [("timeseries", tables.timeseries)]:
        path = folder / f"{name}.csv"
        _write_csv(table, path)
        written.append(path)

    path = folder / "scenario.yaml"
    _write_text(path, dump_data(results.scenario.model_dump(mode="json")))
    written.append(path)
    if png:
        from sim.output.pages import plots  # matplotlib is slow to import; only pay when drawing
        written += plots.save_all(results, folder / "plots")
    if report:
        from sim.output.pages.report import build_report
        path = folder / "report.html"
        _write_text(path, build_report(results, sweep))
        written.append(path)
    return written


def write_outputs(results, out_dir: Path, *, force: bool = False, sweep=None,
                  inputs=(), report: bool = True, requests: bool = True,
                  csv: bool = False, png: bool = False) -> list[Path]:
    """Write ``results`` to ``out_dir`` and return the final paths of the files written
    (``report=False``: no report.html; ``png``: the charts as PNG files under plots/ as
    well, drawn with matplotlib, which costs more than a small run). ``requests=False``
    leaves out the per-request table (the summary, time series, plots and report are made
    from the run's columns all the same); ``csv`` writes requests.csv (and steps.csv)
    beside their Parquet files.

    An existing non-empty ``out_dir`` is replaced only with ``force`` and only if
    fleetsim wrote it (see :mod:`sim.output.files.output_paths`; written by
    :func:`sim.output.files.atomic_write.write_folder`), and only once the new
    folder is complete. Parent folders are created as needed.
    """
    if sweep is not None and not report:
        raise ValueError("a sweep's curves are drawn in the report")
    if csv and not requests:
        raise ValueError("csv copies the request table, which requests=False leaves out")
    return write_folder(lambda folder: _write_all(results, folder, sweep, report, requests,
                                                  csv, png), out_dir,
                        force=force, inputs=inputs, command="run")


def write_results(results, folder: str | Path, *, force: bool = False,
                  report: bool = True, requests: bool = True, csv: bool = False,
                  png: bool = False) -> list[Path]:
    """:meth:`Results.write`: the files ``fleetsim run --out folder`` writes, by its writer
    (:func:`sim.output.files.outputs.write_outputs`) and under its rules: an existing non-empty
    ``folder`` is replaced only with ``force`` and only if fleetsim wrote it, never one
    holding the scenario or a data file it read."""
    from sim.config.data_files import data_files
    scenario = results.scenario
    inputs = [str(p) for p in data_files(scenario)]
    if scenario._source is not None:
        inputs.append(scenario._source)
    return write_outputs(results, Path(folder), force=force, inputs=inputs, report=report,
                         requests=requests, csv=csv, png=png)
