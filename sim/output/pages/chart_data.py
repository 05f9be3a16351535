"""The run report's charts as data: what each chart draws, made with numpy from the run's
columns (no matplotlib, no pandas), for the page to draw in the browser
(``static/report_charts.js``, with uPlot). The form of a chart and its building blocks
are ``chart_spec.py``'s; the charts, ``latency_charts.py``'s, ``request_charts.py``'s and
``load_charts.py``'s; this module gathers the page's charts by section.
"""
from __future__ import annotations

from sim.output.pages.chart_spec import RunData
from sim.output.pages.latency_charts import ccdf_chart, latency_over_time_chart
from sim.output.pages.load_charts import replicas_chart, timeseries_chart
from sim.output.pages.request_charts import lengths_charts, teams_chart

LATENCIES = (("ttft", "time to first token"), ("tpot", "time per output token"),
             ("e2e", "end-to-end latency"))


def run_charts(results) -> dict[str, list[dict]]:
    """Every chart of the run's page, by the page's section."""
    run = RunData(results)
    return {
        "latency": [ccdf_chart(run, metric, what) for metric, what in LATENCIES],
        "over_time": [latency_over_time_chart(run)],
        "lengths": lengths_charts(run),
        "load": [replicas_chart(run),
                 timeseries_chart(run, "throughput", "throughput and cost",
                                  [("tokens_per_s", "tokens per s", 1.0, None),
                                   ("cost_usd_per_h", "cost (USD per hour)", 1.0, None)]),
                 timeseries_chart(run, "queue", "queued and running requests",
                                  [("queued", "queued requests", 1.0, None),
                                   ("running", "running sequences", 1.0, None)]),
                 timeseries_chart(run, "kv_util", "KV cache use and GPU busy time",
                                  [("kv_util", "KV cache used (%)", 100.0, (0.0, 102.0)),
                                   ("busy_frac", "GPU busy (%)", 100.0, (0.0, 102.0))])],
        "teams": [teams_chart(run)],
    }

