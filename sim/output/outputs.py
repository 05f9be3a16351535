"""Write one run's results to a folder, atomically and reproducibly.

The folder holds::

    summary.json       the summary dictionary (strict JSON: NaN/inf become null)
    requests.parquet   one row per request, dtypes kept
    requests.csv       the same rows; categories as plain strings, floats in full
    timeseries.csv     one row per pool per sample
    steps.csv          one row per engine step (only with ``record_steps``)
    scenario.yaml      the scenario as validated, every default filled in
    plots/*.png        see :mod:`sim.output.plots` (not with ``report=False``)
    report.html        one self-contained page (not with ``report=False``)
    .fleetsim-output   the marker that lets ``--force`` replace the folder later

Everything is written into a hidden sibling folder first and renamed into
place at the end, so an interrupted run never leaves a folder that looks
complete. Identical results give byte-identical files: nothing depends on
the clock (``Results.wall_s`` is deliberately left out).

A text cell of a CSV file that a spreadsheet would read as a formula (it
starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return) is written
with a leading ``'`` (OWASP's rule); numeric columns and the parquet file keep
their values as they are.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.yamlio import dump_data

from sim.output.atomic_write import write_folder

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


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        fh.write(text)


def _write_all(results, folder: Path, sweep=None, report: bool = True) -> list[Path]:
    """Write every output file into ``folder`` (the plots and the page only with
    ``report``); returns their paths."""
    written = []
    path = folder / "summary.json"
    _write_text(path, summary_json(results.summary))
    written.append(path)

    import pyarrow.parquet as pq
    tables = results.tables
    path = folder / "requests.parquet"
    pq.write_table(tables.requests.arrow(), path)
    written.append(path)

    for name, table in (("requests", tables.requests), ("timeseries", tables.timeseries),
                        ("steps", tables.steps)):
        if table is None:
            continue
        path = folder / f"{name}.csv"
        _write_csv(table, path)
        written.append(path)

    path = folder / "scenario.yaml"
    _write_text(path, dump_data(results.scenario.model_dump(mode="json")))
    written.append(path)
    if not report:
        return written

    from sim.output import plots  # matplotlib is slow to import; only pay when drawing
    images = plots.render_all(results)      # drawn once: the files and the report
    written += plots.save_all(results, folder / "plots", images)

    from sim.output.report import build_report
    path = folder / "report.html"
    _write_text(path, build_report(results, sweep, images=images))
    written.append(path)
    return written


def write_outputs(results, out_dir: Path, *, force: bool = False, sweep=None,
                  inputs=(), report: bool = True) -> list[Path]:
    """Write ``results`` to ``out_dir`` and return the final paths of the files written
    (``report=False``: the data files only, no plots and no report.html; drawing them is
    most of a small run's time beyond its simulation).

    An existing non-empty ``out_dir`` is replaced only with ``force`` and only if
    fleetsim wrote it (see :mod:`sim.output.output_paths`; written by
    :func:`sim.output.atomic_write.write_folder`), and only once the new
    folder is complete. Parent folders are created as needed.
    """
    if sweep is not None and not report:
        raise ValueError("a sweep's curves are drawn in the report")
    return write_folder(lambda folder: _write_all(results, folder, sweep, report), out_dir,
                        force=force, inputs=inputs, command="run")
