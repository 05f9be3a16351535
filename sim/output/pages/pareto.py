"""Pareto views of a set of fleet options (sweep points, sizing answers): which options no
other beats on both of two figures.

Two views, as planners read them: output tokens per second per GPU (what the hardware
yields) against tokens per second per user (what each user sees, 1 / TPOT p50), both
better higher; and cost per hour (lower is better) against the tightest SLO's margin
(higher is better).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from sim.output.pages.figure_kit import new_figure, plain_text, title

# (x column, y column, x better higher, y better higher, x label, y label)
VIEWS = (
    ("tokens_per_s_per_user", "output_tokens_per_s_per_gpu", True, True,
     "tokens per s per user (1 / TPOT p50)", "output tokens per s per GPU"),
    ("slo_margin_min", "cost_usd_per_h", True, False,
     "tightest SLO's margin (%, below 0: missed)", "cost (USD per hour)"),
)


def front(x: np.ndarray, y: np.ndarray, *, x_higher: bool = True,
          y_higher: bool = True) -> np.ndarray:
    """True for each point no other point dominates: at least as good on both figures and
    better on one. A point missing either figure (NaN) is never on the front."""
    x = np.asarray(x, dtype=np.float64) * (1.0 if x_higher else -1.0)
    y = np.asarray(y, dtype=np.float64) * (1.0 if y_higher else -1.0)
    known = np.isfinite(x) & np.isfinite(y)
    on = np.zeros(len(x), dtype=bool)
    for i in np.flatnonzero(known):
        others = known.copy()
        others[i] = False
        at_least = (x[others] >= x[i]) & (y[others] >= y[i])
        better = (x[others] > x[i]) | (y[others] > y[i])
        on[i] = not (at_least & better).any()
    return on


def views(table: pd.DataFrame) -> list[tuple]:
    """The views of :data:`VIEWS` that ``table`` has figures for."""
    out = []
    for view in VIEWS:
        x, y = view[0], view[1]
        if x in table.columns and y in table.columns:
            values = table[[x, y]].apply(pd.to_numeric, errors="coerce").to_numpy()
            if np.isfinite(values).all(axis=1).any():
                out.append(view)
    return out


@plain_text
def pareto_figure(table: pd.DataFrame, labels: list[str], name: str | None = None) -> Figure:
    """Each view of ``table`` (one row per option, ``labels`` naming them) side by side:
    every option a grey dot, the front joined and each of its options named; titled with
    the scenario's ``name`` when given."""
    shown = views(table)
    fig = new_figure((5.2 * max(len(shown), 1), 4.0))
    if name is not None:
        title(fig, name, "Pareto fronts of the options")
    for i, (xc, yc, x_hi, y_hi, x_label, y_label) in enumerate(shown):
        ax = fig.add_subplot(1, len(shown), i + 1)
        scale = 100.0 if xc == "slo_margin_min" else 1.0
        x = pd.to_numeric(table[xc], errors="coerce").to_numpy(dtype=np.float64) * scale
        y = pd.to_numeric(table[yc], errors="coerce").to_numpy(dtype=np.float64)
        on = front(x, y, x_higher=x_hi, y_higher=y_hi)
        ax.scatter(x, y, s=14, color="0.65", label="option")
        order = np.flatnonzero(on)[np.argsort(x[on])]
        ax.plot(x[order], y[order], "o-", color="C3", label="Pareto front")
        for k in order:
            ax.annotate(labels[k], (x[k], y[k]), textcoords="offset points", xytext=(4, 4),
                        fontsize=7)
        if xc == "slo_margin_min":
            ax.axvline(0.0, color="0.3", linewidth=0.8, linestyle=":")
        ax.set_xlabel(x_label)
        ax.set_ylabel(y_label)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    return fig
