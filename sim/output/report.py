"""report.html: one self-contained page a planner can send.

The scenario, the summary, latency CDFs, queue and replicas over time and
per-team usage, with the plots embedded as PNG data. Every string that came
from a scenario (team, pool, model names, the YAML itself) is HTML-escaped, its control
characters shown as ``\\xNN``.
"""
from __future__ import annotations

import base64
import html
import re

import yaml
from matplotlib.figure import Figure

from sim.output.figure_kit import SLO_STYLE, log_axis, title
from sim.output.plots import new_figure, plain_text, png_bytes
from sim.output.spans import pool_window
from sim.output.table import plain_number

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:.85em}img{max-width:100%}"""


# characters HTML may not hold as text: C0 controls but tab, line feed and carriage return,
# DEL and the C1 controls (a scenario's description or a sweep table's values may carry them)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def _e(value) -> str:
    """``value`` as HTML text: escaped, and each control character shown as ``\\xNN``."""
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))
    return html.escape(text, quote=True)


def _fmt(value) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return plain_number(value)
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _png(fig: Figure | bytes, alt: str = "plot") -> str:
    if not isinstance(fig, bytes):
        fig = png_bytes(fig, dpi=100)
    data = base64.b64encode(fig).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def build_report(results, sweep=None, images: dict[str, bytes] | None = None) -> str:
    """The run's page; ``sweep`` (a ``fleetsim sweep`` table) adds its
    latency curves; ``images``: the plots already drawn (by name in
    :data:`sim.output.plots.FIGURES`)."""
    from sim.output import plots

    images = images if images is not None else plots.render_all(results)
    s = results.summary
    lat = s["latency_s"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<title>fleetsim: {_e(s['scenario'])}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(s['scenario'])}</h1>",
             f"<p>{_e(results.scenario.description)}</p>" if results.scenario.description else "",
             *_slo_section(s.get("slo")),
             "<h2>Summary</h2>",
             _table(["requests", "value"], [
                 ["arrived", s["requests"]["arrived"]], ["completed", s["requests"]["completed"]],
                 ["rejected", s["requests"]["rejected_total"]],
                 ["unfinished at end", s["requests"]["in_flight_at_end"]],
                 ["active span (first arrival to last end, s)",
                  s["throughput"].get("span_s")],
                 ["requests / s (active span)", s["throughput"]["requests_per_s"]],
                 ["output tokens / s (active span)", s["throughput"]["output_tokens_per_s"]],
                 ["total cost, whole run (USD)", s["cost"]["total_usd"]],
                 ["cost over the active span (USD)", s["cost"].get("active_span_usd")],
                 ["of which in no team's cost: idle capacity (USD)",
                  s["cost"].get("unattributed_usd", 0.0)],
                 ["USD per million output tokens (active span)",
                  s["cost"]["usd_per_million_output_tokens"]]]),
             _table(["latency (ms)", *LATENCY_STATS],
                    [[k.upper() if k != "itl" else "ITL (pooled gaps)"]
                     + [_ms(lat[k].get(q)) for q in LATENCY_STATS]
                     for k in ("ttft", "tpot", "itl", "e2e", "queue") if k in lat]),
             "<h2>Pools</h2>",
             _table(["pool", "model", "hardware", "TP", "PP", "engine", "step times from",
                     "replicas (mean)",
                     "GPU-hours", "cost (USD)", "busy", "MFU", "MBU", "KV cache used"],
                    [[name, p["model"], p["hardware"], p["tp"], p.get("pp", 1),
                      p.get("engine", "-"), p["cost_model"],
                      p["replicas_mean"], p["gpu_hours"], p["cost_usd"],
                      *(_pct(p.get(k)) for k in ("busy_frac", "mfu", "mbu", "kv_util_mean"))]
                     for name, p in ((name, {**p, **pool_window(p)})
                                     for name, p in s["pools"].items())]),
             f"<p class='note'>{GLOSSARY}</p>",
             "<h2>Teams</h2>",
             _table(["team", "requests", "completed", "rejected", "TTFT p99 (ms)",
                     "output tokens", "cost, whole run (USD)", "USD per hour", "USD per day"],
                    [[name, t["requests"], t["completed"], t["rejected"],
                      _ms(t.get("ttft_p99_s")), t["output_tokens"], t["cost_usd"],
                      *per_hour_and_day(t["cost_usd"], s)]
                     for name, t in s["teams"].items()]),
             "<p class='note'>A team's cost per hour and per day: its cost over the run, "
             "at the run's rate (the run's cost over its simulated hours).</p>",
             "<h2>Latency</h2>",
             _png(images["ttft_cdf.png"], "CDF of time to first token"),
             _png(images["tpot_cdf.png"], "CDF of time per output token"),
             _png(images["e2e_cdf.png"], "CDF of end-to-end latency"),
             "<h2>Latency and SLO attainment over time</h2>",
             _png(images["latency_over_time.png"],
                  "latency percentiles and SLO attainment over time"),
             "<h2>Prompt and output lengths</h2>",
             _png(images["lengths.png"], "histograms of prompt and output lengths"),
             "<h2>Load, replicas and cost over time</h2>",
             _png(images["replicas.png"], "replicas and arrivals over time"),
             _png(images["throughput.png"],
                  "output tokens per second and cost per hour over time"),
             _png(images["queue.png"], "queued and running requests over time"),
             _png(images["kv_util.png"], "KV cache use over time"),
             "<h2>Per team: latency, cost, rejections</h2>",
             _png(images["teams.png"], "per team: TTFT, cost and rejections"),
             *(_sweep_section(sweep, results.scenario.slos, s["scenario"])
               if sweep is not None else []),
             "<h2>Scenario</h2>",
             f"<p>{_e(_provenance(results))}</p>",
             f"<pre>{_e(_scenario_text(results.scenario))}</pre></body></html>"]
    return "\n".join(p for p in parts if p)


# the latencies' statistics shown, as summary.json names them (p999: the 99.9th percentile)
LATENCY_STATS = ("mean", "p50", "p90", "p95", "p99", "p999")

GLOSSARY = ("Every pool figure is over the run's active span (first arrival to last "
            "request's end), as the rates are; summary.json gives each pool's whole-run "
            "bill beside it. "
            "busy: share of the billed GPU time a replica was computing; MFU: model FLOPs "
            "used over the GPUs' peak FLOP/s; MBU: bytes moved over peak memory bandwidth (a "
            "decode-heavy pool is bandwidth-bound: high MBU, low MFU); KV cache used: the "
            "mean share of the KV blocks holding tokens.")


HOURS_PER_DAY = 24.0


def per_hour_and_day(usd: float | None, summary: dict) -> tuple[float | None, float | None]:
    """``usd`` spent over the run (``summary``'s, simulated until ``end_s``) as USD per
    hour and per day at the run's rate; None for a run of no time."""
    hours = float(summary.get("end_s") or 0.0) / 3600.0
    if usd is None or hours <= 0:
        return None, None
    return usd / hours, usd / hours * HOURS_PER_DAY


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else seconds * 1e3


def _pct(fraction: float | None) -> str | None:
    return None if fraction is None else f"{fraction * 100:.1f}%"


def _scenario_text(scenario) -> str:
    """The scenario as its author wrote it (the file it was read from), else as fleetsim
    holds it (a scenario built in code or changed by overrides)."""
    from pathlib import Path

    source = getattr(scenario, "_source", None)
    if source is not None:
        try:
            text = Path(source).read_text(encoding="utf-8")
            if yaml.safe_load(text) is not None:
                from sim.config.scenario import Scenario
                data = yaml.safe_load(text)
                data.pop("$schema", None)
                read = Scenario.model_validate(data)
                if read.model_dump(mode="json") == scenario.model_dump(mode="json"):
                    return text         # (not changed since it was read: no override)
        except (OSError, UnicodeDecodeError, yaml.YAMLError, ValueError):
            pass
    return yaml.safe_dump(scenario.model_dump(mode="json", exclude_defaults=True),
                          sort_keys=False)


def _provenance(results) -> str:
    """What made these figures: the tool's version, each pool's step-time source and
    price source."""
    from sim import __version__
    from sim.config.profiles import find_hardware

    scenario = results.scenario
    parts = [f"fleetsim {__version__}, seed {scenario.seed}"]
    for name, pool in scenario.pools.items():
        figures = results.summary["pools"][name]
        if pool.price_per_gpu_hour is not None:
            price = f"USD {pool.price_per_gpu_hour:g} per GPU-hour, set in the scenario"
        else:
            hw = find_hardware(pool.hardware, scenario.hardware)
            rate = getattr(hw.price_per_gpu_hour, pool.pricing) if hw is not None else None
            price = (f"the {figures['hardware']} profile's {pool.pricing} price"
                     + (f" (USD {rate:g} per GPU-hour)" if rate is not None else "")
                     + (f", {hw.price_source}" if hw is not None and hw.price_source
                        else ", of no stated source or date"))
        engine = f"engine {figures['engine']}, " if figures.get("engine") else ""
        parts.append(f"pool {name}: {engine}step times from {figures['cost_model']}; {price}")
    return "; ".join(parts) + "."


def _slo_section(slo: dict | None) -> list[str]:
    """The SLO verdict first: each objective's target, measured value and margin, and
    the goodput, fleet-wide, per team and per stream."""
    if not slo:
        return []
    verdict = "all met" if slo.get("met") else "MISSED"
    rows = []
    scopes = ([("all requests", slo["fleet"])] if slo.get("fleet") else []) + \
        [(f"team {team}", v) for team, v in (slo.get("teams") or {}).items()] + \
        [(f"stream {name}", v) for name, v in (slo.get("streams") or {}).items()]
    for scope, part in scopes:
        for metric, o in part["objectives"].items():
            unit = 1.0 if metric == "attainment" else 1e3
            margin = o.get("margin")
            rows.append([scope, metric + ("" if metric == "attainment" else " (ms)"),
                         o["target"] * unit,
                         None if o.get("measured") is None else o["measured"] * unit,
                         None if margin is None else f"{margin * 100:+.1f}%",
                         "met" if o["met"] else "MISSED"])
        rows.append([scope, "goodput (req/s)", None, part.get("goodput_requests_per_s"),
                     None, f"{part.get('within_every_bound', 0):,} of "
                           f"{part.get('requests', 0):,} within every bound"])
    return [f"<h2>SLOs: {verdict}</h2>",
            _table(["scope", "objective", "target", "measured", "margin", "verdict"], rows)]


SWEEP_X = "output_tokens_per_s"
SWEEP_Y = ("ttft_p99_s", "tpot_p99_s")


def sweep_varied(table) -> list[str]:
    """The columns a sweep varied: those before its first figure."""
    cols = list(table.columns)
    return cols[:cols.index("arrived")] if "arrived" in cols else []


def check_sweep_table(table, where: str) -> None:
    import numpy as np
    import pandas as pd

    from sim.config.errors import ScenarioError
    for column in map(str, table.columns):    # pandas renames a second 'x' to 'x.1'
        stem, dot, number = column.rpartition(".")
        if dot and number.isdigit() and stem in table.columns:
            raise ScenarioError(f"{where} names column {stem!r} twice", file=where, line=1)
    missing = [c for c in (SWEEP_X, *SWEEP_Y) if c not in table.columns]
    if missing or not sweep_varied(table):
        raise ScenarioError(f"{where} is not a `fleetsim sweep` table (missing "
                            f"{', '.join(missing) or 'the varied columns'})", file=where)
    for column in (SWEEP_X, *SWEEP_Y):
        given = table[column]
        values = pd.to_numeric(given, errors="coerce").to_numpy(dtype=np.float64)
        # empty is allowed (a point where no request finished); anything else is a
        # finite number of at least 0
        bad = (given.notna().to_numpy() & ~(np.isfinite(values) & (values >= 0)))
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ScenarioError("not a figure a sweep writes (a finite number, at least "
                                "0, or empty)", file=where, line=row + 2, field=column)
    if len(table) == 0:
        raise ScenarioError(f"{where} is a sweep table of no points (a header only)",
                            file=where)


MAX_SWEEP_LINES = 12     # more values of the first varied field: points coloured by it

# a varied field that sets the offered load (arrival rates, their scale, closed-loop
# clients): its sweep is drawn against the throughput achieved
LOAD_WORDS = ("rate", "rate_scale", "arrival", "clients")


def is_load_field(field: str) -> bool:
    return any(part in LOAD_WORDS for part in str(field).split("."))


def sweep_x(table) -> str:
    """The x axis of a sweep's curves: the throughput achieved when the sweep varied the
    load (or nothing else), else the last field it varied (replicas, TP, a price ...)."""
    varied = sweep_varied(table)
    if not varied or any(is_load_field(v) for v in varied):
        return SWEEP_X
    return varied[-1]


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


def _sweep_section(table, slos=None, name: str | None = None) -> list[str]:
    varied = sweep_varied(table)
    shown = varied + [c for c in ("requests_per_s", SWEEP_X, "ttft_p50_s", "ttft_p99_s",
                                  "tpot_p50_s", "tpot_p99_s", "rejected", "cost_usd")
                      if c in table.columns]
    from sim.output import pareto

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
                      f"<body><h1>{_e(name)}: sweep</h1>", *_sweep_section(table, slos, name),
                      "</body></html>"])
