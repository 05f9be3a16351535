"""What every plot of a run shares: sizes, the plain-text rule for names, pools and teams
in a stable order with stable colours, the two layouts, and reproducible PNG bytes."""
from __future__ import annotations

import functools
import warnings

import pandas as pd
import matplotlib
from matplotlib.figure import Figure

from sim.entities.request import Status
from sim.output.pages import chart_spec

FIGSIZE = (7.0, 4.2)
DPI = 110
# zlib's fastest level: the same pixels in files about a third larger, written in a
# quarter of the time (encoding was a fifth of drawing the report)
SAVE_KW = {"dpi": DPI, "format": "png", "metadata": {"Software": None},
           "pil_kwargs": {"compress_level": 1}}
MS = 1e3             # latencies are drawn in milliseconds (seconds in the data)


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


def pools(results) -> list[str]:
    """Pool names in scenario order (the summary's), then any others seen in data."""
    names = [str(p) for p in results.summary.get("pools", {})]
    for frame in (results.requests, results.timeseries):
        if "pool" in getattr(frame, "columns", ()):
            names += [str(p) for p in pd.unique(frame["pool"].astype(str)) if str(p)]
    return list(dict.fromkeys(names))


def colours(names: list[str]) -> dict[str, str]:
    return {n: f"C{i % 10}" for i, n in enumerate(names)}


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A figure that lays itself out as it is drawn (constrained layout: drawn once, where
    ``tight_layout`` draws it a second time), for figures whose tick labels are names."""
    return Figure(figsize=figsize, layout="constrained")


# margins (inches) of a figure laid out by hand: room for numeric y tick labels and the y
# label on the left, the x tick labels and label below; a twin y axis needs the right one
MARGIN_LEFT_IN, MARGIN_BOTTOM_IN, MARGIN_TOP_IN = 0.9, 0.55, 0.45
MARGIN_RIGHT_IN, MARGIN_TWIN_IN = 0.25, 0.8


def fixed_figure(figsize: tuple[float, float], *, rows: int = 1, twin: bool = False,
                 gap_in: float = 0.15) -> Figure:
    """A figure for ``rows`` stacked numeric axes, laid out once by hand (constrained layout
    measures every text first: 40% of drawing a figure); ``gap_in``: the space between
    stacked axes, ``twin``: room on the right for a second y axis."""
    width, height = figsize
    fig = Figure(figsize=figsize)
    right_in = MARGIN_TWIN_IN if twin else MARGIN_RIGHT_IN
    axes_in = (height - MARGIN_BOTTOM_IN - MARGIN_TOP_IN - (rows - 1) * gap_in) / rows
    fig.subplots_adjust(left=MARGIN_LEFT_IN / width, right=1.0 - right_in / width,
                        bottom=MARGIN_BOTTOM_IN / height, top=1.0 - MARGIN_TOP_IN / height,
                        hspace=gap_in / axes_in)
    return fig


def plain_tick(value: float, _pos=None) -> str:
    """A log axis's tick label as a plain number: ``1,000``, ``20``, ``0.05``."""
    return f"{value:,.0f}" if value >= 1 else f"{value:.6f}".rstrip("0").rstrip(".")


def log_axis(ax, which: str = "x", subs: tuple[float, ...] = (1.0, 2.0, 5.0)) -> None:
    """A log ``which`` axis (``"x"`` or ``"y"``) whose tick labels are plain numbers (its
    default labels are mathtext, which names are drawn without: they would show as
    ``$\\mathdefault{10^{0}}$``)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator

    axis = ax.xaxis if which == "x" else ax.yaxis
    (ax.set_xscale if which == "x" else ax.set_yscale)("log")
    # ``subs`` of each decade labelled (1, 2 and 5 by default; fewer past a handful), no
    # unlabelled minor ticks: each tick is four artists to make and draw
    axis.set_major_locator(LogLocator(subs=subs, numticks=8))
    axis.set_major_formatter(FuncFormatter(plain_tick))
    axis.set_minor_locator(NullLocator())


def log_x(ax) -> None:
    """A log x axis whose tick labels are plain numbers."""
    log_axis(ax, "x")


HOUR_S = chart_spec.HOUR_S


def hhmm(seconds: float, _pos=None) -> str:
    """Seconds since the start as ``hh:mm`` (hours past 24 go on counting: ``30:00``)."""
    minutes = int(round(abs(seconds) / 60.0))
    return ("-" if seconds < 0 and minutes else "") + f"{minutes // 60:02d}:{minutes % 60:02d}"


def time_axis(ax, span_s: float, label: str = "simulated time") -> None:
    """The x axis of a chart over simulated time: seconds for a run of an hour or less,
    ``hh:mm`` past an hour (a day in seconds reads 0-86,400)."""
    if span_s <= HOUR_S:
        ax.set_xlabel(f"{label} (s)")
        return
    from matplotlib.ticker import FuncFormatter, MultipleLocator

    step = chart_spec.clock_step_s(span_s)
    ax.xaxis.set_major_locator(MultipleLocator(step))
    ax.xaxis.set_major_formatter(FuncFormatter(hhmm))
    ax.set_xlim(0.0, span_s)
    ax.set_xlabel(f"{label} (hh:mm)")


def title(fig: Figure, name: str, what: str) -> None:
    """``fig`` titled with the scenario's ``name`` and what it shows (a PNG is often read
    away from its page)."""
    fig.suptitle(f"{name}: {what}", fontsize="medium")


def scenario_name(results) -> str:
    return str(results.summary.get("scenario") or getattr(results.scenario, "name", "run"))


def slo_targets(results, metric: str) -> list[tuple[str, float]]:
    """The fleet-wide SLO targets (seconds) on ``metric`` (``ttft``, ``tpot``, ``e2e``...),
    as ``(statistic, target)``: p50 ... p99 and mean."""
    return chart_spec.slo_targets(results.scenario, metric)


SLO_STYLE = {"color": "0.25", "linewidth": 1.0, "linestyle": ":"}


def note(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="0.4")


def completed(results) -> pd.DataFrame:
    req = results.requests
    if len(req) == 0 or "status" not in req.columns:
        return req.iloc[0:0]
    return req[req["status"].astype(str) == Status.COMPLETED]


# a figure shows at most this many teams (the ones with the most requests): a line or a
# bar each, past which a plot is unreadable and slow to draw
MAX_PLOTTED_TEAMS = chart_spec.MAX_TEAMS


def busiest_teams(req: pd.DataFrame) -> list[str]:
    """The teams of ``req`` by name, at most :data:`MAX_PLOTTED_TEAMS` of them (those with
    the most requests)."""
    counts = req["team"].astype(str).value_counts()
    if len(counts) > MAX_PLOTTED_TEAMS:
        ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
        counts = dict(ranked[:MAX_PLOTTED_TEAMS])
    return sorted(str(team) for team in counts.keys())


# at most this many intervals between the ticks of a linear axis (matplotlib's default
# fits as many as the axis has room for, nine on a 7-inch one): each tick is four artists
# (two marks, a label, a grid line) to make, lay out and draw
LINEAR_TICK_BINS = 6


def few_ticks(fig: Figure) -> None:
    """Each linear axis of ``fig`` ticked at round steps, at most :data:`LINEAR_TICK_BINS`
    of them (axes given other ticks, log or hh:mm, are left as they are)."""
    from matplotlib.ticker import AutoLocator

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            locator = axis.get_major_locator()
            if type(locator) is AutoLocator:
                locator.set_params(nbins=LINEAR_TICK_BINS)


def png_bytes(fig: Figure, dpi: int = DPI) -> bytes:
    """``fig`` (from :func:`new_figure`) laid out and drawn once, as a reproducible PNG.
    The figure is left as drawn: clearing it cleared each of its axes first (rebuilding
    every axis and its ticks), a tenth of drawing the report, for a figure about to be
    dropped."""
    import io

    buf = io.BytesIO()
    few_ticks(fig)
    # a figure with hundreds of series may not fit its margins and is drawn as it is (a
    # warning would break ``--quiet``)
    with warnings.catch_warnings(), matplotlib.rc_context(PLAIN_TEXT):
        warnings.filterwarnings("ignore", message="constrained_layout not applied",
                                category=UserWarning)
        fig.savefig(buf, **{**SAVE_KW, "dpi": dpi})
    return buf.getvalue()
