"""report.html: one self-contained page a planner can send.

The scenario, the summary, latency CDFs, queue and replicas over time and
per-team usage, with the plots embedded as PNG data. Every string that came
from a scenario (team, pool, model names, the YAML itself) is HTML-escaped.
"""
from __future__ import annotations

import base64
import html
import io

import yaml
from matplotlib.figure import Figure

CSS = """body{font-family:system-ui,sans-serif;max-width:1000px;margin:2em auto;color:#222}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:.3em .6em;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
pre{background:#f8f8f8;padding:1em;overflow:auto;font-size:.85em}img{max-width:100%}"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:,.4g}"
    if isinstance(value, int):
        return f"{value:,}"
    return "-" if value is None else str(value)


def _table(header: list[str], rows: list[list]) -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(_fmt(c))}</td>" for c in row) + "</tr>"
                   for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    data = base64.b64encode(buf.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def build_report(results) -> str:
    from sim import plots

    s = results.summary
    lat = s["latency_s"]
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<title>fleetsim: {_e(s['scenario'])}</title><style>{CSS}</style></head><body>",
             f"<h1>{_e(s['scenario'])}</h1>",
             f"<p>{_e(results.scenario.description)}</p>" if results.scenario.description else "",
             "<h2>Summary</h2>",
             _table(["requests", "value"], [
                 ["arrived", s["requests"]["arrived"]], ["completed", s["requests"]["completed"]],
                 ["rejected", s["requests"]["rejected_total"]],
                 ["unfinished at end", s["requests"]["in_flight_at_end"]],
                 ["requests / s", s["throughput"]["requests_per_s"]],
                 ["output tokens / s", s["throughput"]["output_tokens_per_s"]],
                 ["total cost (USD)", s["cost"]["total_usd"]],
                 ["USD per million output tokens", s["cost"]["usd_per_million_output_tokens"]]]),
             _table(["latency (s)", "mean", "p50", "p90", "p99"],
                    [[k.upper()] + [lat[k][q] for q in ("mean", "p50", "p90", "p99")]
                     for k in ("ttft", "tpot", "e2e", "queue")]),
             "<h2>Pools</h2>",
             _table(["pool", "model", "hardware", "TP", "replicas (mean)", "GPU-hours",
                     "cost (USD)", "busy", "MFU", "KV util"],
                    [[name, p["model"], p["hardware"], p["tp"], p["replicas_mean"],
                      p["gpu_hours"], p["cost_usd"], p["busy_frac"], p["mfu"],
                      p["kv_util_mean"]] for name, p in s["pools"].items()]),
             "<h2>Teams</h2>",
             _table(["team", "requests", "completed", "rejected", "TTFT p99 (s)",
                     "output tokens", "cost (USD)"],
                    [[name, t["requests"], t["completed"], t["rejected"], t.get("ttft_p99_s"),
                      t["output_tokens"], t["cost_usd"]] for name, t in s["teams"].items()]),
             "<h2>Latency</h2>", _png(plots.ttft_cdf_figure(results)),
             _png(plots.tpot_cdf_figure(results)),
             "<h2>Load, replicas and cost over time</h2>", _png(plots.replicas_figure(results)),
             _png(plots.queue_figure(results)), _png(plots.kv_util_figure(results)),
             "<h2>Per team</h2>", _png(plots.teams_figure(results)),
             "<h2>Scenario</h2>",
             f"<pre>{_e(yaml.safe_dump(results.scenario.model_dump(mode='json'), sort_keys=False))}"
             "</pre></body></html>"]
    return "\n".join(p for p in parts if p)


def sweep_figure(table, x: str = "requests_per_s", y: str = "ttft_p99_s") -> Figure:
    """Throughput against latency over a sweep's points."""
    fig = Figure(figsize=(6, 4))
    ax = fig.add_subplot()
    ax.plot(table[x], table[y], "o-")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.grid(True, alpha=0.3)
    return fig
