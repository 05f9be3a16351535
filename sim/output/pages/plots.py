"""PNG plots of one run, drawn on plain :class:`matplotlib.figure.Figure` objects.

No pyplot: figures are not registered anywhere, need no GUI backend, and
are freed when dropped. PNGs are written by the Agg renderer with no
``Software`` tag, so identical results give identical files.

Each ``*_figure`` function takes a :class:`sim.output.results.Results` and returns
a Figure; :func:`save_all` writes them all. Empty data gives a figure with a
note instead of an error.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.entities.request import Status
from sim.output.pages import plots_requests
from sim.output.pages.figure_kit import (FIGSIZE, MS, SLO_STYLE, busiest_teams, colours,
                                   completed, fixed_figure, log_axis, log_x, new_figure, note,
                                   plain_text, png_bytes, pools, scenario_name, slo_targets,
                                   time_axis, title)

from sim.output.pages.latency_charts import LOG_DECADES as _LOG_DECADES, SHARE_ABOVE as _SHARE_ABOVE

__all__ = ["FIGURES", "new_figure", "plain_text", "png_bytes", "render_all", "save_all"]



# an empirical CDF is drawn through at most this many of its points (evenly spaced in
# rank, the first and last included): finer than a figure's pixels, so it looks the same
# as every point, and a million-request run draws as fast as a small one
CDF_POINTS = 2048


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    rank = np.arange(len(x))
    if len(x) > CDF_POINTS:
        rank = np.unique(np.linspace(0, len(x) - 1, CDF_POINTS).round().astype(np.int64))
    return x[rank], (rank + 1) / len(x)


def _exceedance(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The share of ``values`` above each drawn value (1 - the CDF), through at most
    :data:`CDF_POINTS` points; the largest (whose share is 0, off a log axis) is left off."""
    x, below = _ecdf(values)
    above = 1.0 - below
    keep = above > 0
    return x[keep], above[keep]


def _cdf_figure(results, column: str, label: str, metric: str, what: str) -> Figure:
    """The share of completed requests slower than x (1 - the CDF of ``column``, seconds,
    drawn in milliseconds) on a log y axis, so the tail (p99, p99.9) takes as much of the
    chart as the median; each fleet-wide SLO target on ``metric`` is a dotted line, and
    the x axis reaches it."""
    fig = fixed_figure(FIGSIZE)
    title(fig, scenario_name(results), what)
    ax = fig.add_subplot()
    ax.set_xlabel(label)
    ax.set_ylabel("share of completed requests slower")
    ax.grid(True, alpha=0.3)
    done = completed(results)
    done = done[np.isfinite(done[column].to_numpy(dtype=np.float64))] if len(done) else done
    slos = slo_targets(results, metric)
    for stat, target in slos:
        ax.axvline(target * MS, **SLO_STYLE, label=f"SLO {metric.upper()} {stat}")
        if stat in _SHARE_ABOVE:
            ax.axhline(_SHARE_ABOVE[stat], color="0.6", linewidth=0.6, linestyle=":")
    if len(done) == 0:
        note(ax, "no completed requests")
        return fig

    names = pools(results)
    colour = colours(names)
    for pool in names:
        v = done.loc[done["pool"].astype(str) == pool, column].to_numpy(dtype=np.float64) * MS
        if len(v) > 1:
            ax.step(*_exceedance(v), where="post", color=colour[pool], label=f"pool {pool}")
    teams = busiest_teams(done)
    if len(teams) > 1:
        for i, team in enumerate(teams):
            v = done.loc[done["team"].astype(str) == team, column].to_numpy(dtype=np.float64) * MS
            if len(v) > 1:
                ax.step(*_exceedance(v), where="post", linestyle="--", linewidth=1.0,
                        color=f"C{(len(names) + i) % 10}", label=f"team {team}")

    values = done[column].to_numpy(dtype=np.float64)
    log_axis(ax, "y", subs=(1.0,))     # 1, 0.1, 0.01: p90 and p99 on the decades
    ax.set_ylim(min(0.5 / len(values), 0.01), 1.0)
    positive = values[values > 0]
    if len(positive) and np.log10(positive.max() / positive.min()) > _LOG_DECADES:
        log_x(ax)
    elif slos:      # a linear axis from 0 that reaches the furthest target
        reach = max(float(values.max()), max(t for _, t in slos)) * MS
        ax.set_xlim(0.0, reach * 1.05)
    if slos and ax.get_xscale() == "log":
        lo, hi = ax.get_xlim()
        ax.set_xlim(min(lo, min(t for _, t in slos) * MS / 1.2),
                    max(hi, max(t for _, t in slos) * MS * 1.2))
    ax.legend(loc="upper right", fontsize="small")
    return fig


@plain_text
def ttft_cdf_figure(results) -> Figure:
    """Share of requests slower than each time to first token, per pool (and per team)."""
    return _cdf_figure(results, "ttft_s", "time to first token (ms)", "ttft",
                       "time to first token, share of requests slower")


@plain_text
def tpot_cdf_figure(results) -> Figure:
    """Share of requests slower than each time per output token, per pool (and per team)."""
    return _cdf_figure(results, "tpot_s", "time per output token (ms)", "tpot",
                       "time per output token, share of requests slower")


@plain_text
def e2e_cdf_figure(results) -> Figure:
    """Share of requests slower than each end-to-end latency, per pool (and per team)."""
    return _cdf_figure(results, "e2e_s", "end-to-end latency (ms)", "e2e",
                       "end-to-end latency, share of requests slower")


def _timeseries_figure(results, panels: list[tuple[str, str, float]], what: str, *,
                       twin: bool = False) -> Figure:
    """One stacked axis per ``(column, y label, scale)``, one line per pool; titled
    ``what``."""
    fig = fixed_figure((FIGSIZE[0], FIGSIZE[1] * (0.6 + 0.4 * len(panels))),
                       rows=len(panels), twin=twin)
    title(fig, scenario_name(results), what)
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    ts = results.timeseries
    names = pools(results)
    colour = colours(names)
    have = len(ts) > 0 and all(c in ts.columns for c, _, _ in panels) and "time_s" in ts.columns
    for ax, (column, label, scale) in zip(axes, panels):
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if not have:
            note(ax, "no samples")
            continue
        for pool in names:
            rows = ts[ts["pool"].astype(str) == pool]
            if len(rows):
                ax.plot(rows["time_s"].to_numpy(), rows[column].to_numpy() * scale,
                        color=colour[pool], label=f"pool {pool}")
        ax.set_ylim(bottom=0.0)  # after plotting, so the top still autoscales
        if ax is axes[0]:
            ax.legend(loc="upper right", fontsize="small")
    time_axis(axes[-1], float(ts["time_s"].max()) if have else 0.0)
    return fig


@plain_text
def queue_figure(results) -> Figure:
    """Queued and running sequences over time, per pool."""
    return _timeseries_figure(results, [("queued", "queued requests", 1.0),
                                        ("running", "running sequences", 1.0)],
                              "queued and running requests")


@plain_text
def kv_util_figure(results) -> Figure:
    """KV-cache utilisation (% of blocks in use) and the GPUs' busy share (% of the
    billed time computing) over time, per pool."""
    fig = _timeseries_figure(results, [("kv_util", "KV cache used (%)", 100.0),
                                       ("busy_frac", "GPU busy (%)", 100.0)],
                             "KV cache use and GPU busy time")
    for ax in fig.axes:
        ax.set_ylim(0.0, 102.0)
    return fig


@plain_text
def replicas_figure(results) -> Figure:
    """Replicas (billed and ready) per pool over time, against the arrival rate."""
    fig = _timeseries_figure(results, [("replicas", "replicas (billed)", 1.0),
                                       ("ready", "replicas ready", 1.0)],
                             "replicas against arrivals", twin=True)
    ax = fig.axes[0].twinx()
    req = results.requests
    interval = float(getattr(results.scenario, "sample_interval", 1.0))
    if len(req):
        t = req["arrival_s"].to_numpy()
        edges = np.arange(0.0, t.max() + 2 * interval, interval)
        counts, _ = np.histogram(t, bins=edges)
        ax.step(edges[1:], counts / interval, where="pre", color="0.6", lw=0.8,
                label="arrivals")
        ax.legend(loc="upper left", fontsize="small")
    ax.set_ylabel("arrivals per s")
    ax.set_ylim(bottom=0.0)
    return fig


@plain_text
def throughput_figure(results) -> Figure:
    """Output tokens per second and cost per hour (billed replicas at the pool's price),
    per pool over time."""
    return _timeseries_figure(results, [("tokens_per_s", "tokens per s", 1.0),
                                        ("cost_usd_per_h", "cost (USD per hour)", 1.0)],
                              "throughput and cost")


@plain_text
def teams_figure(results) -> Figure:
    """Per team: TTFT p50 and p99 of completed requests, cost, and rejections by reason."""
    fig = new_figure((FIGSIZE[0], FIGSIZE[1] * 1.8))
    title(fig, scenario_name(results), "per team: TTFT, cost, rejections")
    top, middle, bottom = fig.subplots(3, 1)
    req = results.requests
    teams = busiest_teams(req) if len(req) else []
    if not teams:
        for ax in (top, middle, bottom):
            note(ax, "no requests")
        return fig
    x = np.arange(len(teams))
    done = completed(results)
    ttft = done["ttft_s"].groupby(done["team"].astype(str))
    for offset, q, name in ((-0.2, 50, "p50"), (0.2, 99, "p99")):
        by_team = ttft.quantile(q / 100.0)
        top.bar(x + offset, [by_team.get(t, 0.0) * MS for t in teams], width=0.4,
                label=f"TTFT {name}")
    top.set_ylabel("time to first token (ms)")
    for stat, target in slo_targets(results, "ttft"):
        if stat in ("p50", "p99"):
            top.axhline(target * MS, **SLO_STYLE, label=f"SLO TTFT {stat}")
    top.legend(fontsize="small")
    cost = results.summary.get("teams", {})
    middle.bar(x, [cost.get(t, {}).get("cost_usd", 0.0) for t in teams], color="C2")
    middle.set_ylabel("cost (USD)")
    rejected = req[req["status"].astype(str) == Status.REJECTED]
    counts = pd.crosstab(rejected["team"].astype(str), rejected["reject_reason"].astype(str))
    base = np.zeros(len(teams))
    for reason in sorted(str(r) for r in counts.columns):
        height = counts[reason].reindex(teams, fill_value=0).to_numpy(dtype=float)
        bottom.bar(x, height, bottom=base, label=reason)
        base += height
    if counts.empty:
        note(bottom, "no rejections")
    else:
        bottom.legend(fontsize="small")
    bottom.set_ylabel("rejected requests")
    for ax in (top, middle, bottom):
        ax.set_xticks(x, teams)
        ax.set_xlim(-0.5, len(teams) - 0.5)
    return fig


FIGURES = {
    "ttft_cdf.png": ttft_cdf_figure,
    "tpot_cdf.png": tpot_cdf_figure,
    "e2e_cdf.png": e2e_cdf_figure,
    "latency_over_time.png": plots_requests.latency_over_time_figure,
    "lengths.png": plots_requests.lengths_figure,
    "queue.png": queue_figure,
    "kv_util.png": kv_util_figure,
    "replicas.png": replicas_figure,
    "throughput.png": throughput_figure,
    "teams.png": teams_figure,
}


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a reproducible PNG and release its drawing state."""
    Path(path).write_bytes(png_bytes(fig))
    return path


def _draw(name: str) -> bytes:
    """One plot of the results a drawing process was forked with, as PNG bytes."""
    return png_bytes(FIGURES[name](_FORKED_RESULTS))


_FORKED_RESULTS = None


def render_all(results, *, processes: int | None = None) -> dict[str, bytes]:
    """Every plot of :data:`FIGURES`, drawn once (the files and the report share them).

    Drawing is most of a small run's output time, one core's work per figure: where the
    machine has more than one core and can fork (Linux), the figures are drawn side by side
    in forked processes that share ``results`` without copying it; the bytes are the same
    either way. ``processes``: at most this many (default: the cores, up to 4); 1 draws
    them here."""
    import os

    global _FORKED_RESULTS
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    processes = min(cores, 4, len(FIGURES)) if processes is None else processes
    if processes <= 1 or not _can_fork():
        return {name: png_bytes(make(results)) for name, make in FIGURES.items()}
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    _FORKED_RESULTS = results
    try:
        with ProcessPoolExecutor(processes, mp_context=multiprocessing.get_context("fork")) as pool:
            return dict(zip(FIGURES, pool.map(_draw, FIGURES)))
    finally:
        _FORKED_RESULTS = None


def _can_fork() -> bool:
    """Forking is safe here: the platform has it, and this process is not a daemon (one
    may not have children) and runs no other thread (a lock held by one would stay held in
    the child)."""
    import multiprocessing
    import threading

    return ("fork" in multiprocessing.get_all_start_methods()
            and not multiprocessing.current_process().daemon
            and threading.active_count() == 1)


def save_all(results, folder: Path, images: dict[str, bytes] | None = None) -> list[Path]:
    """Write every plot in :data:`FIGURES` into ``folder`` (created if needed), from
    ``images`` when already drawn."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    images = images if images is not None else render_all(results)
    paths = []
    for name in FIGURES:
        (folder / name).write_bytes(images[name])
        paths.append(folder / name)
    return paths
