"""report.html: one self-contained page a planner can send.

The scenario, the summary, then the charts: latency (share of requests slower, per pool
and team), latency and SLO attainment over time, prompt and output lengths, replicas,
throughput, queue, KV use and GPU busy time over time, and per-team usage. The charts are
drawn by the browser (uPlot, inlined with the page, so it works offline as one file) from
the run's data embedded as JSON (:mod:`sim.output.pages.chart_data`): hovering shows the values,
and writing the page costs no plotting library. Every string that came from a scenario
(team, pool, model names, the YAML itself) is HTML-escaped, its control characters shown
as ``\\xNN``; in the embedded JSON ``<``, ``>`` and ``&`` are written as ``\\u003c`` ...,
so no name can end its script element.
"""
from __future__ import annotations

import base64
import html
import json
import re
from functools import cache
from pathlib import Path

import yaml

from sim.output.spans import pool_window
from sim.output.table import plain_number

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:.85em}img{max-width:100%}
.chart{margin:1em 0 2em}.note{color:#555;font-size:.9em}"""


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


def _png(fig, alt: str = "plot") -> str:
    """``fig`` (PNG bytes, or a matplotlib Figure drawn here) as an inline image."""
    if not isinstance(fig, bytes):
        from sim.output.pages.figure_kit import png_bytes
        fig = png_bytes(fig, dpi=100)
    data = base64.b64encode(fig).decode("ascii")
    return f'<img alt="{_e(alt)}" src="data:image/png;base64,{data}">'


def build_report(results, sweep=None) -> str:
    """The run's page; ``sweep`` (a ``fleetsim sweep`` table) adds its
    latency curves."""
    from sim.output.pages.chart_data import run_charts

    charts = run_charts(results)
    s = results.summary
    lat = s["latency_s"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<title>fleetsim: {_e(s['scenario'])}</title><style>{CSS}</style>"
             f"<style>{_static('uPlot.min.css')}</style></head><body>",
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
             "<p class='note'>Charts are drawn from the run's data in this page; hover for "
             "values, drag to zoom, double-click to zoom out.</p>",
             "<noscript><p>The charts need JavaScript (no network: the page carries "
             "everything it draws with).</p></noscript>",
             *_holders(charts["latency"]),
             "<h2>Latency and SLO attainment over time</h2>",
             *_holders(charts["over_time"]),
             "<h2>Prompt and output lengths</h2>",
             *_holders(charts["lengths"]),
             "<h2>Load, replicas and cost over time</h2>",
             *_holders(charts["load"]),
             "<h2>Per team: latency, cost, rejections</h2>",
             *_holders(charts["teams"]),
             *(_sweep_section(sweep, results.scenario.slos, s["scenario"])
               if sweep is not None else []),
             "<h2>Scenario</h2>",
             f"<p>{_e(_provenance(results))}</p>",
             f"<pre>{_e(_scenario_text(results.scenario))}</pre>",
             *_chart_scripts(charts), "</body></html>"]
    return "\n".join(p for p in parts if p)


def _sweep_section(table, slos, name) -> list[str]:
    from sim.output.pages.sweep_report import sweep_section     # matplotlib: only with a sweep
    return sweep_section(table, slos, name)


UPLOT_VERSION = "1.6.32"        # sim/output/pages/static/README.md says where it came from
STATIC = Path(__file__).parent / "static"


@cache
def _static(name: str) -> str:
    """A file shipped in sim/output/pages/static (the chart library, its style, the page's
    drawing code)."""
    return (STATIC / name).read_text(encoding="utf-8")


def _holders(charts: list[dict]) -> list[str]:
    """An element per chart for the page's script to draw into."""
    return [f'<div class="chart" id="chart-{_e(c["name"])}" role="img" '
            f'aria-label="{_e(c["alt"])}"></div>' for c in charts]


def charts_json(charts: dict[str, list[dict]]) -> str:
    """The charts as JSON that may stand inside a script element: ``<``, ``>`` and ``&``
    escaped (a name cannot close the element), no NaN (null instead)."""
    text = json.dumps({"charts": [c for part in charts.values() for c in part]},
                      separators=(",", ":"), allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _chart_scripts(charts: dict[str, list[dict]]) -> list[str]:
    """The run's chart data, uPlot (its licence text in a comment before it) and the
    code drawing one with the other, all inline: the page needs no network."""
    return [f'<script type="application/json" id="fleetsim-charts">{charts_json(charts)}'
            "</script>",
            f"<script>/*! uPlot {UPLOT_VERSION}, under its licence:\n"
            f"{_static('uPlot.LICENSE').strip()}\n*/\n{_static('uPlot.iife.min.js')}</script>",
            f"<script>{_static('report_charts.js')}</script>"]


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
    from sim.version import __version__
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


