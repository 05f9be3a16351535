"""A sweep's latency curves and table: its own page (``fleetsim sweep --report``) and the
section ``fleetsim run --sweep`` adds to a run's page. Drawn with matplotlib as a PNG (a
sweep's cost is its runs, not this figure); the run report itself draws in the browser
(:mod:`sim.output.pages.chart_data`)."""
from __future__ import annotations

from matplotlib.figure import Figure

from sim.output.pages.figure_kit import SLO_STYLE, log_axis, new_figure, plain_text, title
from sim.output.pages.report import CSS, _e, _png, _table
from sim.output.sweep_table import (MAX_SWEEP_LINES, SWEEP_X, SWEEP_Y, sweep_varied,
                                     sweep_x)

def _slo_target(slos, column: str) -> float | None:
    """The fleet-wide SLO target (seconds) on a sweep column (``ttft_p99_s``), if set."""
    return getattr(slos, column[:-2], None) if slos is not None and column.endswith("_s") \
        else None


@plain_text
def sweep_figure(table, x: str | None = None, ys: tuple[str, ...] = SWEEP_Y, *, slos=None,
                 name: str | None = None) -> Figure:
    """Latency (ms) over a sweep's points against ``x`` (default :func:`sweep_x`): one
    line per value of the first varied field when two or more were varied (past
    :data:`MAX_SWEEP_LINES` values, one scatter coloured by it), else one line. Latency
    is on a log scale with plain tick labels when any is above zero; each fleet-wide SLO
    target of ``slos`` is a dotted line, so the knee (where a curve crosses it) shows.
    ``name``: the scenario's, in the title."""
    import numpy as np
    import pandas as pd

    x = sweep_x(table) if x is None else x
    varied = sweep_varied(table)
    fig = new_figure((5.2 * len(ys), 3.8))
    if name is not None:
        title(fig, name, "latency against " + x.replace("_", " "))
    grouped = len(varied) > 1 and varied[0] != x
    groups = ([(f"{varied[0]} = {key}", part) for key, part in table.groupby(varied[0], sort=True)]
              if grouped else [(None, table)])
    for i, y in enumerate(ys):
        ax = fig.add_subplot(1, len(ys), i + 1)
        ms = pd.to_numeric(table[y], errors="coerce") * 1e3
        if len(groups) > MAX_SWEEP_LINES:
            codes = pd.factorize(table[varied[0]], sort=True)[0]
            dots = ax.scatter(table[x], ms, c=codes, s=8, cmap="viridis")
            fig.colorbar(dots, ax=ax, label=f"{varied[0]} (rank of {len(groups)} values)")
        else:
            for label, part in groups:
                part = part.sort_values(x)
                ax.plot(part[x], ms[part.index], "o-", label=label)
        target = _slo_target(slos, y)
        if target is not None:
            ax.axhline(target * 1e3, **SLO_STYLE,
                       label=f"SLO {y[:-2].replace('_', ' ').upper()} {target * 1e3:,g} ms")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        ax.set_xlabel(x.replace("_", " "))
        if x == SWEEP_X:
            from matplotlib.ticker import StrMethodFormatter
            ax.xaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))    # 20,000
        ax.set_ylabel(y[:-2].replace("_", " ").upper() + " (ms)")
        if (ms.to_numpy(dtype=np.float64) > 0).any():
            log_axis(ax, "y")   # points at 0 (none finished that fast) are left off
        ax.grid(True, alpha=0.3)
    return fig


def sweep_section(table, slos=None, name: str | None = None) -> list[str]:
    varied = sweep_varied(table)
    shown = varied + [c for c in ("requests_per_s", SWEEP_X, "ttft_p50_s", "ttft_p99_s",
                                  "tpot_p50_s", "tpot_p99_s", "rejected", "cost_usd")
                      if c in table.columns]
    from sim.output.pages import pareto

    x = sweep_x(table)
    heading = "Sweep: latency against " + _e(x.replace("_", " "))
    parts = [f"<h2>{heading}</h2>",
             f"<p>{len(table)} sweep points over {_e(', '.join(varied))}"
             + ("; the dotted lines are the SLO targets" if slos is not None
                and any(_slo_target(slos, y) is not None for y in SWEEP_Y) else "")
             + ".</p>",
             _png(sweep_figure(table, slos=slos, name=name),
                  "latency against " + x.replace("_", " ") + " over the sweep"),
             _table(shown, table[shown].values.tolist())]
    if pareto.views(table):
        labels = [", ".join(f"{v}={row[v]}" for v in varied) for _, row in table.iterrows()]
        parts += ["<h2>Pareto views</h2>",
                  "<p>The points no other beats on both figures, joined and named.</p>",
                  _png(pareto.pareto_figure(table, labels, name),
                       "Pareto fronts of the sweep's points")]
    return parts


def build_sweep_report(table, name: str, slos=None) -> str:
    """A page of its own for a sweep: the curves (against the scenario's fleet-wide
    ``slos``, when given) and the table."""
    return "\n".join([f"<!doctype html><html><head><meta charset='utf-8'>"
                      f"<title>fleetsim sweep: {_e(name)}</title><style>{CSS}</style></head>"
                      f"<body><h1>{_e(name)}: sweep</h1>", *sweep_section(table, slos, name),
                      "</body></html>"])
