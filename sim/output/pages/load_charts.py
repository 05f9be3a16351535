"""The run report's charts of the fleet's load over time, one line per pool: replicas
against arrivals, and any of the sampled time series. A series of more than
:data:`MAX_TIME_POINTS` samples is averaged over buckets of samples, so a chart's size
stays bounded whatever the run's length."""
from __future__ import annotations

import numpy as np

from sim.output.pages.chart_spec import (RunData, axis_spec, codes_and_names, series_spec,
                                    time_axis)

MAX_TIME_POINTS = 2000  # per series over time


def _downsampled(t: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """At most :data:`MAX_TIME_POINTS` points: the mean of each run of consecutive
    samples (their first time) when there are more."""
    n = len(t)
    if n <= MAX_TIME_POINTS:
        return t, values
    per = int(np.ceil(n / MAX_TIME_POINTS))
    starts = np.arange(0, n, per)
    sums = np.add.reduceat(values, starts)
    counts = np.diff(np.append(starts, n))
    return t[starts], sums / counts


def timeseries_chart(run: RunData, name: str, what: str,
                     panels: list[tuple[str, str, float, tuple | None]]) -> dict:
    """One panel per ``(column, y label, scale, y range)`` of the time series, one line per
    pool."""
    ts = run.ts
    have = len(ts) > 0 and "time_s" in ts.columns and \
        all(c in ts.columns for c, _, _, _ in panels)
    out = []
    pool_codes, pool_names = codes_and_names(ts["pool"]) if have else (np.zeros(0), [])
    for column, label, scale, y_range in panels:
        series = []
        for i, pool in enumerate(run.pools):
            if pool not in pool_names:
                continue
            rows = pool_codes == pool_names.index(pool)
            t, v = _downsampled(np.asarray(ts["time_s"], np.float64)[rows],
                                np.asarray(ts[column], np.float64)[rows] * scale)
            series.append(series_spec(f"pool {pool}", t, v, colour=i, digits=4))
        out.append({"y": axis_spec(label, range_=y_range), "series": series, "rules": [],
                    "from_zero": True})
    span = float(np.max(np.asarray(ts["time_s"], np.float64))) if have else 0.0
    return {"name": name, "title": run.title(what), "alt": what, "x": time_axis(span),
            "panels": out, "note": None if have else "no samples"}


def replicas_chart(run: RunData) -> dict:
    """Replicas (billed and ready) per pool over time; arrivals per second beside the
    first, on a second y axis."""
    chart = timeseries_chart(run, "replicas", "replicas against arrivals",
                             [("replicas", "replicas (billed)", 1.0, None),
                              ("ready", "replicas ready", 1.0, None)])
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    if len(arrivals):
        interval = float(getattr(run.scenario, "sample_interval", 1.0))
        last = float(arrivals.max())
        bins = int(min(MAX_TIME_POINTS, np.floor(last / interval) + 1))
        width = max(interval, last / bins)         # the bins reach the last arrival
        edges = np.arange(bins + 1) * width
        counts, _ = np.histogram(arrivals, bins=edges)
        chart["panels"][0]["series"].append(
            series_spec("arrivals per s", edges[:-1], counts / width, colour=-1, axis=1,
                    kind="step", digits=4))
        chart["panels"][0]["y2"] = axis_spec("arrivals per s")
    return chart

