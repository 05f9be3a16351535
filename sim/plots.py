"""PNG plots of one run, drawn on plain :class:`matplotlib.figure.Figure` objects.

No pyplot: figures are not registered anywhere, need no GUI backend, and
are freed when dropped. PNGs are written by the Agg renderer with no
``Software`` tag, so identical results give identical files.

Each ``*_figure`` function takes a :class:`sim.results.Results` and returns
a Figure; :func:`save_all` writes them all. Empty data gives a figure with a
note instead of an error.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.request import Status

FIGSIZE = (7.0, 4.2)
DPI = 110
_SAVE_KW = {"dpi": DPI, "format": "png", "metadata": {"Software": None}}
_LOG_DECADES = 2.0   # log x axis when the data spans more than this many decades


def _pools(results) -> list[str]:
    """Pool names in scenario order (the summary's), then any others seen in data."""
    names = [str(p) for p in results.summary.get("pools", {})]
    for frame in (results.requests, results.timeseries):
        if "pool" in getattr(frame, "columns", ()):
            names += [str(p) for p in pd.unique(frame["pool"].astype(str)) if str(p)]
    return list(dict.fromkeys(names))


def _colours(names: list[str]) -> dict[str, str]:
    return {n: f"C{i % 10}" for i, n in enumerate(names)}


def _note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def _completed(results) -> pd.DataFrame:
    req = results.requests
    if len(req) == 0 or "status" not in req.columns:
        return req.iloc[0:0]
    return req[req["status"].astype(str) == Status.COMPLETED]


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    return x, np.arange(1, len(x) + 1) / len(x)


def _cdf_figure(results, column: str, label: str) -> Figure:
    fig = Figure(figsize=FIGSIZE)
    ax = fig.add_subplot()
    ax.set_xlabel(label)
    ax.set_ylabel("fraction of completed requests")
    ax.set_ylim(0.0, 1.0)
    ax.grid(True, alpha=0.3)
    done = _completed(results)
    done = done[np.isfinite(done[column].to_numpy(dtype=np.float64))] if len(done) else done
    if len(done) == 0:
        _note(ax, "no completed requests")
        return fig

    pools = _pools(results)
    colours = _colours(pools)
    for pool in pools:
        v = done.loc[done["pool"].astype(str) == pool, column].to_numpy(dtype=np.float64)
        if len(v):
            ax.step(*_ecdf(v), where="post", color=colours[pool], label=f"pool {pool}")
    teams = sorted(pd.unique(done["team"].astype(str)))
    if len(teams) > 1:
        for i, team in enumerate(teams):
            v = done.loc[done["team"].astype(str) == team, column].to_numpy(dtype=np.float64)
            ax.step(*_ecdf(v), where="post", linestyle="--", linewidth=1.0,
                    color=f"C{(len(pools) + i) % 10}", label=f"team {team}")

    positive = done[column].to_numpy(dtype=np.float64)
    positive = positive[positive > 0]
    if len(positive) and np.log10(positive.max() / positive.min()) > _LOG_DECADES:
        ax.set_xscale("log")
    ax.legend(loc="lower right", fontsize="small")
    return fig


def ttft_cdf_figure(results) -> Figure:
    """Empirical CDF of time to first token, per pool (and per team if several)."""
    return _cdf_figure(results, "ttft_s", "time to first token (s)")


def tpot_cdf_figure(results) -> Figure:
    """Empirical CDF of time per output token, per pool (and per team if several)."""
    return _cdf_figure(results, "tpot_s", "time per output token (s)")


def _timeseries_figure(results, panels: list[tuple[str, str, float]]) -> Figure:
    """One stacked axis per ``(column, y label, scale)``, one line per pool."""
    fig = Figure(figsize=(FIGSIZE[0], FIGSIZE[1] * (0.6 + 0.4 * len(panels))))
    axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    ts = results.timeseries
    pools = _pools(results)
    colours = _colours(pools)
    have = len(ts) > 0 and all(c in ts.columns for c, _, _ in panels) and "time_s" in ts.columns
    for ax, (column, label, scale) in zip(axes, panels):
        ax.set_ylabel(label)
        ax.grid(True, alpha=0.3)
        if not have:
            _note(ax, "no samples")
            continue
        for pool in pools:
            rows = ts[ts["pool"].astype(str) == pool]
            if len(rows):
                ax.plot(rows["time_s"].to_numpy(), rows[column].to_numpy() * scale,
                        color=colours[pool], label=f"pool {pool}")
        ax.set_ylim(bottom=0.0)  # after plotting, so the top still autoscales
        if ax is axes[0]:
            ax.legend(loc="upper right", fontsize="small")
    axes[-1].set_xlabel("simulated time (s)")
    return fig


def queue_figure(results) -> Figure:
    """Queued and running sequences over time, per pool."""
    return _timeseries_figure(results, [("queued", "queued requests", 1.0),
                                        ("running", "running sequences", 1.0)])


def kv_util_figure(results) -> Figure:
    """KV-cache utilisation (% of blocks in use) over time, per pool."""
    fig = _timeseries_figure(results, [("kv_util", "KV cache used (%)", 100.0)])
    fig.axes[0].set_ylim(0.0, 100.0)
    return fig


FIGURES = {
    "ttft_cdf.png": ttft_cdf_figure,
    "tpot_cdf.png": tpot_cdf_figure,
    "queue.png": queue_figure,
    "kv_util.png": kv_util_figure,
}


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a reproducible PNG and release its drawing state."""
    fig.tight_layout()
    fig.savefig(path, **_SAVE_KW)
    fig.clear()
    return path


def save_all(results, folder: Path) -> list[Path]:
    """Write every plot in :data:`FIGURES` into ``folder`` (created if needed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return [save_figure(make(results), folder / name) for name, make in FIGURES.items()]
