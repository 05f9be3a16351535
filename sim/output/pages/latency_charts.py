"""The run report's latency charts: the share of requests slower than each latency (per
pool and team, against the SLO targets), and latency percentiles and SLO attainment over
time.

Sizes stay bounded whatever the run's length: a share-slower curve is drawn through at
most :data:`CCDF_POINTS` ranks of its values (even in rank, and log-spaced into the tail
so p99.9 is as exact as the median), and latency over time is a percentile per one of
:data:`TIME_BINS` bins.
"""
from __future__ import annotations

import numpy as np

from sim.config.slos import LATENCIES as SLO_LATENCIES, targets
from sim.output.pages.chart_spec import (MS, RunData, axis_spec, codes_and_names, ms_label,
                                    rows_named, rule_spec, series_spec, slo_targets,
                                    time_axis)
from sim.output.columns import Table
from sim.output.slo import POLICY_REFUSALS, within_every_bound

CCDF_POINTS = 1200      # per share-slower curve: half even in rank, half log-spaced in the tail
TIME_BINS = 60          # latency percentiles over time (the PNG's too)
LOG_DECADES = 2.0       # a log x axis when the values span more than this many decades
# the statistic an SLO bounds, as the share of requests above its target it allows
SHARE_ABOVE = {"p50": 0.5, "p90": 0.1, "p95": 0.05, "p99": 0.01}


def _ccdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The share of ``values`` above each of at most :data:`CCDF_POINTS` of them (sorted),
    the largest (share 0, off a log axis) left off."""
    x = np.sort(values)
    n = len(x)
    if n > CCDF_POINTS:
        even = np.linspace(0, n - 1, CCDF_POINTS // 2)
        tail = n - np.geomspace(1, n, CCDF_POINTS // 2)
        rank = np.unique(np.concatenate([even, tail]).round().astype(np.int64))
    else:
        rank = np.arange(n)
    x, above = x[rank], 1.0 - (rank + 1) / n
    # of equal values, the last (the share above them all): x is the page's join key
    last = len(x) - 1 - np.unique(x[::-1], return_index=True)[1]
    x, above = x[last], above[last]
    keep = above > 0
    return x[keep], above[keep]


def ccdf_chart(run: RunData, metric: str, what: str) -> dict:
    """The share of completed requests slower than x (ms) on a log y axis, per pool and
    (with two or more) per team, with each fleet-wide SLO target on ``metric``."""
    column = f"{metric}_s"
    values_all = np.asarray(run.done[column], dtype=np.float64) if len(run.done) else \
        np.zeros(0)
    finite = np.isfinite(values_all)
    values = values_all[finite] * MS
    slos = slo_targets(run.scenario, metric)
    series = []
    if len(values):
        pool_codes, pool_names = codes_and_names(run.done["pool"])
        for i, pool in enumerate(run.pools):
            v = values[(pool_codes == (pool_names.index(pool) if pool in pool_names else -2))
                       [finite]]
            if len(v) > 1:
                series.append(series_spec(f"pool {pool}", *_ccdf(v), kind="step", colour=i,
                                      digits=8))
        if len(run.teams) > 1:
            team_codes, team_names = codes_and_names(run.done["team"])
            for i, team in enumerate(run.teams):
                v = values[(team_codes == team_names.index(team))[finite]] \
                    if team in team_names else np.zeros(0)
                if len(v) > 1:
                    series.append(series_spec(f"team {team}", *_ccdf(v), kind="step",
                                          colour=len(run.pools) + i, dash=True, digits=8))
    rules = [rule_spec("x", t * MS, f"SLO {metric.upper()} {stat} {ms_label(t * MS)} ms")
             for stat, t in slos]
    rules += [rule_spec("y", SHARE_ABOVE[stat], f"{stat}: {SHARE_ABOVE[stat]:g} slower")
              for stat, _ in slos if stat in SHARE_ABOVE]
    positive = values[values > 0]
    log_x = bool(len(positive) and np.log10(positive.max() / positive.min()) > LOG_DECADES)
    targets_ms = [t * MS for _, t in slos]
    if log_x:
        lo, hi = float(positive.min()), float(positive.max())
        if targets_ms:
            lo, hi = min(lo, min(targets_ms) / 1.2), max(hi, max(targets_ms) * 1.2)
        x_range = (lo, hi)
    else:
        top = max([float(values.max()) if len(values) else 1.0, *targets_ms])
        x_range = (0.0, top * 1.05)
    floor = min(0.5 / len(values), 0.01) if len(values) else 0.01
    return {"name": f"{metric}_ccdf", "title": run.title(f"{what}, share of requests slower"),
            "alt": f"share of requests slower than each {what}",
            "x": axis_spec(f"{what} (ms)", log=log_x, range_=x_range),
            "panels": [{"y": axis_spec("share of completed requests slower", log=True,
                                   range_=(floor, 1.0)),
                        "series": series, "rules": rules}],
            "note": None if series else "no completed requests"}


def _bin_quantiles(bins: np.ndarray, values: np.ndarray,
                   qs: tuple[float, ...]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Per bin (integer labels) of the finite ``values``: the bins present and, for each
    of ``qs``, each bin's quantile (linear between order statistics, as numpy's and
    pandas' default)."""
    keep = np.isfinite(values)
    bins, values = bins[keep], values[keep]
    if len(values) == 0:
        return np.zeros(0), [np.zeros(0) for _ in qs]
    order = np.lexsort((values, bins))
    bins, values = bins[order], values[order]
    labels, start, count = np.unique(bins, return_index=True, return_counts=True)
    out = []
    for q in qs:
        pos = start + q * (count - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.ceil(pos).astype(np.int64)
        out.append(values[lo] + (pos - lo) * (values[hi] - values[lo]))
    return labels, out


def _bin_width_s(run: RunData) -> float:
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    span = float(arrivals.max()) if len(arrivals) else 0.0
    return max(float(getattr(run.scenario, "sample_interval", 1.0)), span / TIME_BINS)


def latency_over_time_chart(run: RunData) -> dict:
    """TTFT and TPOT p50 and p99 of the requests arriving in each time bin, against the
    fleet-wide SLO targets; below, the share of requests within every SLO (when set)."""
    width = _bin_width_s(run)
    arrivals = np.asarray(run.req["arrival_s"], dtype=np.float64)
    slo = run.scenario.slos
    panels = []
    done_bins = np.floor(np.asarray(run.done["arrival_s"], dtype=np.float64) / width) \
        if len(run.done) else np.zeros(0)
    for metric, colour in (("ttft", 0), ("tpot", 1)):
        series = []
        values = np.asarray(run.done[f"{metric}_s"], dtype=np.float64) if len(run.done) \
            else np.zeros(0)
        labels, both = _bin_quantiles(done_bins, values, (0.5, 0.99))
        for (q, dash), got in zip(((50, False), (99, True)), both):
            if len(labels):
                series.append(series_spec(f"{metric.upper()} p{q}", labels * width, got * MS,
                                      colour=colour, dash=dash, digits=4))
        rules = [rule_spec("y", t * MS, f"SLO {metric.upper()} {stat} {ms_label(t * MS)} ms")
                 for stat, t in slo_targets(run.scenario, metric) if stat != "mean"]
        panels.append({"y": axis_spec(f"{metric.upper()} (ms)", range_=None), "series": series,
                       "rules": rules, "from_zero": True})
    fleet = targets(slo)
    if fleet and len(run.req):
        # the requests SLOs judge (all but policy refusals), as sim.output.slo.judged
        judged = ~np.asarray(run.req["reject_reason"].isin(POLICY_REFUSALS))
        done = rows_named(run.req["status"], "completed")[judged]
        latencies = {f"{m}_s": np.asarray(run.req[f"{m}_s"])[judged][done]
                     for m in SLO_LATENCIES}
        ok = np.zeros(int(judged.sum()), dtype=bool)
        ok[done] = within_every_bound(Table(latencies), fleet)
        bins = np.floor(np.asarray(run.req["arrival_s"], dtype=np.float64)[judged] / width)
        labels, inverse = np.unique(bins, return_inverse=True)
        share = np.bincount(inverse, weights=ok, minlength=len(labels)) / \
            np.bincount(inverse, minlength=len(labels))
        rules = [] if slo.attainment is None else \
            [rule_spec("y", slo.attainment * 100.0, f"SLO attainment {slo.attainment * 100:g}%")]
        panels.append({"y": axis_spec("within every SLO (%)", range_=(0.0, 102.0)),
                       "series": [series_spec("within every SLO", labels * width, share * 100.0,
                                          colour=2, digits=3)],
                       "rules": rules})
    span = float(arrivals.max()) if len(arrivals) else 0.0
    return {"name": "latency_over_time",
            "title": run.title("latency and SLO attainment over time"),
            "alt": "latency percentiles and SLO attainment over time",
            "x": time_axis(span, "arrival time"), "panels": panels,
            "note": None if len(run.done) else "no completed requests"}

