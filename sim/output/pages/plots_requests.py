"""Plots over the request table in time and size: latency percentiles and SLO attainment
over the run, and the prompt and output lengths served.

Time is cut into at most :data:`TIME_BINS` bins by arrival (never finer than the sampling
interval), so a million-request run draws as fast as a small one.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.config.slos import targets
from sim.output.pages.latency_charts import TIME_BINS
from sim.output.pages.request_charts import length_bins
from sim.entities.request import Status
from sim.output.pages.figure_kit import (FIGSIZE, MS, completed, fixed_figure, log_x, note,
                                   plain_text, scenario_name, time_axis, title)
from sim.output.slo import judged, within_every_bound

# latency percentiles drawn over time: (column, percentile, label)
LATENCY_LINES = (("ttft_s", 50, "TTFT p50"), ("ttft_s", 99, "TTFT p99"),
                 ("tpot_s", 50, "TPOT p50"), ("tpot_s", 99, "TPOT p99"))


def bin_width_s(results) -> float:
    """The width of a time bin: the arrival window over :data:`TIME_BINS`, at least the
    scenario's sampling interval."""
    arrivals = results.requests["arrival_s"].to_numpy(dtype=np.float64)
    span = float(arrivals.max()) if len(arrivals) else 0.0
    interval = float(getattr(results.scenario, "sample_interval", 1.0))
    return max(interval, span / TIME_BINS)


def percentiles_over_time(results) -> pd.DataFrame:
    """Per time bin (by arrival) of completed requests: its start (``time_s``) and each
    line of :data:`LATENCY_LINES` in seconds (NaN where no request of the bin has one)."""
    done = completed(results)
    width = bin_width_s(results) if len(results.requests) else 1.0
    bins = np.floor(done["arrival_s"].to_numpy(dtype=np.float64) / width)
    out = {}
    for column, q, label in LATENCY_LINES:
        values = pd.Series(done[column].to_numpy(dtype=np.float64), index=bins)
        out[label] = values.groupby(level=0).quantile(q / 100.0)
    table = pd.DataFrame(out)
    table.insert(0, "time_s", table.index.to_numpy(dtype=np.float64) * width)
    return table.reset_index(drop=True)


def attainment_over_time(results) -> pd.DataFrame | None:
    """Per time bin (by arrival): the share of the requests SLOs judge (all but policy
    refusals) completed within every fleet-wide latency bound; None when the scenario
    sets no fleet-wide SLO."""
    slos = targets(results.scenario.slos)
    if not slos:
        return None
    req = judged(results.requests)
    width = bin_width_s(results) if len(req) else 1.0
    ok = np.zeros(len(req), dtype=bool)
    done = (req["status"].astype(str) == Status.COMPLETED).to_numpy()
    ok[done] = within_every_bound(req[done], slos)
    bins = np.floor(req["arrival_s"].to_numpy(dtype=np.float64) / width)
    share = pd.Series(ok, index=bins).groupby(level=0).mean()
    return pd.DataFrame({"time_s": share.index.to_numpy(dtype=np.float64) * width,
                         "attainment": share.to_numpy(dtype=np.float64)})


@plain_text
def latency_over_time_figure(results) -> Figure:
    """TTFT and TPOT p50 and p99 of the requests arriving in each time bin, against the
    fleet-wide SLO targets; below, the share of requests meeting every SLO (when set)."""
    attained = attainment_over_time(results) if len(results.requests) else None
    rows = 3 if attained is not None else 2
    fig = fixed_figure((FIGSIZE[0], FIGSIZE[1] * (0.6 + 0.4 * rows)), rows=rows)
    title(fig, scenario_name(results), "latency and SLO attainment over time")
    axes = fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    table = percentiles_over_time(results) if len(results.requests) else None
    slo = results.scenario.slos
    for ax, metric, colour in ((axes[0], "ttft", "C0"), (axes[1], "tpot", "C1")):
        ax.set_ylabel(f"{metric.upper()} (ms)")
        ax.grid(True, alpha=0.3)
        if table is None or table.empty:
            note(ax, "no completed requests")
            continue
        for style, q in (("-", 50), ("--", 99)):
            label = f"{metric.upper()} p{q}"
            ax.plot(table["time_s"], table[label] * MS, style, color=colour, label=label)
        for stat in ("p50", "p90", "p95", "p99"):
            target = getattr(slo, f"{metric}_{stat}", None)
            if target is not None:
                ax.axhline(target * MS, color="0.3", linewidth=0.8, linestyle=":",
                           label=f"SLO {metric.upper()} {stat}")
        ax.set_ylim(bottom=0.0)
        ax.legend(loc="upper right", fontsize="small")
    if attained is not None:
        ax = axes[2]
        ax.set_ylabel("within every SLO (%)")
        ax.grid(True, alpha=0.3)
        ax.plot(attained["time_s"], attained["attainment"] * 100.0, color="C2")
        if slo.attainment is not None:
            ax.axhline(slo.attainment * 100.0, color="0.3", linewidth=0.8, linestyle=":",
                       label="SLO attainment")
            ax.legend(loc="lower right", fontsize="small")
        ax.set_ylim(0.0, 102.0)
    arrivals = results.requests["arrival_s"].to_numpy(dtype=np.float64)
    time_axis(axes[-1], float(arrivals.max()) if len(arrivals) else 0.0, "arrival time")
    return fig


@plain_text
def lengths_figure(results) -> Figure:
    """Histograms of the prompt and output lengths (tokens) of the requests that arrived;
    output lengths of completed requests."""
    fig = fixed_figure((FIGSIZE[0], FIGSIZE[1] * 1.4), rows=2, gap_in=0.55)
    title(fig, scenario_name(results), "prompt and output lengths")
    top, bottom = fig.subplots(2, 1)
    for ax, frame, column, label in ((top, results.requests, "prompt_tokens", "prompt tokens"),
                                     (bottom, completed(results), "output_tokens",
                                      "output tokens")):
        ax.set_xlabel(label)
        ax.set_ylabel("requests")
        ax.grid(True, alpha=0.3)
        values = frame[column].to_numpy(dtype=np.float64)
        if len(values) == 0:
            note(ax, "no requests")
            continue
        edges, log = length_bins(values)
        counts, _ = np.histogram(values, bins=edges)
        ax.stairs(counts, edges, fill=True, alpha=0.6, color="C0")
        if log:
            log_x(ax)
        mean = float(values.mean())
        ax.axvline(mean, color="0.3", linewidth=0.8, linestyle=":", label=f"mean {mean:,.0f}")
        ax.legend(loc="upper right", fontsize="small")
    return fig
