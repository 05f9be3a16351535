"""PNG plots of one run, drawn on plain :class:`matplotlib.figure.Figure` objects.

No pyplot: figures are not registered anywhere, need no GUI backend, and
are freed when dropped. PNGs are written by the Agg renderer with no
``Software`` tag, so identical results give identical files.

Each ``*_figure`` function takes a :class:`sim.output.results.Results` and returns
a Figure; :func:`save_all` writes them all. Empty data gives a figure with a
note instead of an error.
"""
from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import matplotlib
from matplotlib.figure import Figure

from sim.core.request import Status

FIGSIZE = (7.0, 4.2)
DPI = 110
_SAVE_KW = {"dpi": DPI, "format": "png", "metadata": {"Software": None}}
_LOG_DECADES = 2.0   # log x axis when the data spans more than this many decades


# names (teams, pools, models, varied values) are drawn as written: a "$" would otherwise
# start matplotlib's mathtext ("cost$^$" fails to draw, "$x$" would be drawn as math).
# A text takes the setting when it is made, so figures are made under it, not only drawn.
PLAIN_TEXT = {"text.parse_math": False}


def plain_text(make):
    """``make`` (a figure maker) run with every text it adds drawn as written."""
    @functools.wraps(make)
    def made(*args, **kwargs):
        with matplotlib.rc_context(PLAIN_TEXT):
            return make(*args, **kwargs)
    return made


def _pools(results) -> list[str]:
    """Pool names in scenario order (the summary's), then any others seen in data."""
    names = [str(p) for p in results.summary.get("pools", {})]
    for frame in (results.requests, results.timeseries):
        if "pool" in getattr(frame, "columns", ()):
            names += [str(p) for p in pd.unique(frame["pool"].astype(str)) if str(p)]
    return list(dict.fromkeys(names))


def _colours(names: list[str]) -> dict[str, str]:
    return {n: f"C{i % 10}" for i, n in enumerate(names)}


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure that lays itself out as it is drawn (constrained layout: drawn once, where
    ``tight_layout`` draws it a second time)."""
    return Figure(figsize=figsize, layout="constrained")


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
    fig = new_figure(FIGSIZE)
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
    teams = _busiest_teams(done)
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


@plain_text
def ttft_cdf_figure(results) -> Figure:
    """Empirical CDF of time to first token, per pool (and per team if several)."""
    return _cdf_figure(results, "ttft_s", "time to first token (s)")


@plain_text
def tpot_cdf_figure(results) -> Figure:
    """Empirical CDF of time per output token, per pool (and per team if several)."""
    return _cdf_figure(results, "tpot_s", "time per output token (s)")


def _timeseries_figure(results, panels: list[tuple[str, str, float]]) -> Figure:
    """One stacked axis per ``(column, y label, scale)``, one line per pool."""
    fig = new_figure((FIGSIZE[0], FIGSIZE[1] * (0.6 + 0.4 * len(panels))))
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


@plain_text
def queue_figure(results) -> Figure:
    """Queued and running sequences over time, per pool."""
    return _timeseries_figure(results, [("queued", "queued requests", 1.0),
                                        ("running", "running sequences", 1.0)])


@plain_text
def kv_util_figure(results) -> Figure:
    """KV-cache utilisation (% of blocks in use) over time, per pool."""
    fig = _timeseries_figure(results, [("kv_util", "KV cache used (%)", 100.0)])
    fig.axes[0].set_ylim(0.0, 100.0)
    return fig


@plain_text
def replicas_figure(results) -> Figure:
    """Replicas (billed and ready) per pool over time, against the arrival rate."""
    fig = _timeseries_figure(results, [("replicas", "replicas (billed)", 1.0),
                                       ("ready", "replicas ready", 1.0)])
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
                                        ("cost_usd_per_h", "cost (USD per hour)", 1.0)])


# a figure shows at most this many teams (the ones with the most requests): a line or a
# bar each, past which a plot is unreadable and slow to draw
MAX_PLOTTED_TEAMS = 20


def _busiest_teams(req: pd.DataFrame) -> list[str]:
    """The teams of ``req`` by name, at most :data:`MAX_PLOTTED_TEAMS` of them (those with
    the most requests)."""
    counts = req["team"].astype(str).value_counts()
    if len(counts) > MAX_PLOTTED_TEAMS:
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        counts = dict(ranked[:MAX_PLOTTED_TEAMS])
    return sorted(str(team) for team in counts.keys())


@plain_text
def teams_figure(results) -> Figure:
    """Per team: TTFT p50 and p99 of completed requests, and rejections by reason."""
    fig = new_figure((FIGSIZE[0], FIGSIZE[1] * 1.3))
    top, bottom = fig.subplots(2, 1)
    req = results.requests
    teams = _busiest_teams(req) if len(req) else []
    if not teams:
        _note(top, "no requests")
        _note(bottom, "no requests")
        return fig
    done = _completed(results)
    x = np.arange(len(teams))
    for offset, q, name in ((-0.2, 50, "p50"), (0.2, 99, "p99")):
        vals = [np.percentile(done[done["team"].astype(str) == t]["ttft_s"], q)
                if (done["team"].astype(str) == t).any() else 0.0 for t in teams]
        top.bar(x + offset, vals, width=0.4, label=f"TTFT {name}")
    top.set_xticks(x, teams)
    top.set_ylabel("time to first token (s)")
    top.legend(fontsize="small")
    rejected = req[req["status"].astype(str) == Status.REJECTED]
    reasons = sorted(str(r) for r in pd.unique(rejected["reject_reason"].astype(str)))
    base = np.zeros(len(teams))
    for reason in reasons:
        counts = np.array([((rejected["team"].astype(str) == t)
                            & (rejected["reject_reason"].astype(str) == reason)).sum()
                           for t in teams], dtype=float)
        bottom.bar(x, counts, bottom=base, label=reason)
        base += counts
    if not reasons:
        _note(bottom, "no rejections")
    else:
        bottom.legend(fontsize="small")
    bottom.set_xticks(x, teams)
    bottom.set_ylabel("rejected requests")
    return fig


FIGURES = {
    "ttft_cdf.png": ttft_cdf_figure,
    "tpot_cdf.png": tpot_cdf_figure,
    "queue.png": queue_figure,
    "kv_util.png": kv_util_figure,
    "replicas.png": replicas_figure,
    "throughput.png": throughput_figure,
    "teams.png": teams_figure,
}


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    """``fig`` (from :func:`new_figure`) laid out and drawn once, as a reproducible PNG; its
    drawing state released."""
    import io

    buf = io.BytesIO()
    # a figure with hundreds of series may not fit its margins and is drawn as it is (a
    # warning would break ``--quiet``)
    with warnings.catch_warnings(), matplotlib.rc_context(PLAIN_TEXT):
        warnings.filterwarnings("ignore", message="constrained_layout not applied",
                                category=UserWarning)
        fig.savefig(buf, **{**_SAVE_KW, "dpi": dpi})
    fig.clear()
    return buf.getvalue()


def save_figure(fig: Figure, path: Path) -> Path:
    """Write ``fig`` as a reproducible PNG and release its drawing state."""
    Path(path).write_bytes(png_bytes(fig))
    return path


def render_all(results) -> dict[str, bytes]:
    """Every plot of :data:`FIGURES`, drawn once (the files and the report share them)."""
    return {name: png_bytes(make(results)) for name, make in FIGURES.items()}


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
